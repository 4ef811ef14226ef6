"""dataset/place_data.py run for real: it verifies the checksum of the file it
fetches, places NAME.csv atomically (nothing on a mismatch, a good file never
replaced by a bad one), and prints the training command with the right
columns; and the training script's error for a data set not yet placed."""

import csv
import gzip
import hashlib
import importlib.util
import shlex
import subprocess
import sys

from helpers import DDP, ROOT, error_lines, shared_dataset
import pytest

PLACE = ROOT / "dataset" / "place_data.py"
BBBP = ROOT / "dataset" / "BBBP.csv"
BBBP_MD5 = "66286cb9e6b148bd75d80c870df580fb"


def place(*args):
    return subprocess.run(
        [sys.executable, "dataset/place_data.py", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def command_line(stdout):
    """The printed training command, split as a shell would."""
    lines = [line for line in stdout.splitlines() if line.startswith("torchrun ")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0])


def flag_values(words, flag):
    """The values after `flag`, up to the next flag."""
    start = words.index(flag) + 1
    end = next((i for i in range(start, len(words)) if words[i].startswith("--")), len(words))
    return words[start:end]


def assert_one_error(result, *expected):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr) == result.stderr.strip().splitlines(), (
        result.stderr
    )  # one line, nothing else
    assert len(error_lines(result.stderr)) == 1, result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert "torchrun" not in result.stdout  # no command hint for a file that was not placed


def test_bbbp_from_a_url_is_placed_verified_with_its_columns(tmp_path):
    result = place("BBBP", "--url", BBBP.as_uri(), "--dest-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    placed = tmp_path / "BBBP.csv"
    assert placed.read_bytes() == BBBP.read_bytes()
    assert f"md5 {BBBP_MD5} verified" in result.stdout  # the mirror's checksum, of the file fetched
    words = command_line(result.stdout)
    assert words[:4] == [
        "torchrun",
        "--master_port",
        "31133",
        "scripts/basic_neural_network_ddp.py",
    ]
    assert words[4] == str(placed)
    assert flag_values(words, "--smiles-column") == ["smiles"]
    assert flag_values(words, "--label-column") == ["p_np"]
    assert "--smiles-column smiles --label-column p_np" in result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["BBBP.csv"]  # no temporary file left behind

    again = place("BBBP", "--dest-dir", tmp_path)  # verified already: no download, still the hint
    assert again.returncode == 0, again.stderr
    assert "already in place" in again.stdout
    assert flag_values(command_line(again.stdout), "--label-column") == ["p_np"]


def test_a_tampered_file_is_refused_and_the_good_one_kept(tmp_path):
    good = place("BBBP", "--from", BBBP, "--dest-dir", tmp_path)
    assert good.returncode == 0, good.stderr
    placed = tmp_path / "BBBP.csv"
    before = placed.stat().st_mtime_ns

    served = tmp_path / "served"
    served.mkdir()
    tampered = served / "BBBP.csv"
    tampered.write_bytes(BBBP.read_bytes().replace(b",1,", b",0,", 1))
    found = hashlib.md5(tampered.read_bytes()).hexdigest()
    result = place("BBBP", "--url", tampered.as_uri(), "--dest-dir", tmp_path)
    assert_one_error(result, tampered.as_uri(), f"md5 {found}", BBBP_MD5, "nothing placed")
    assert placed.read_bytes() == BBBP.read_bytes()
    assert placed.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["BBBP.csv", "served"]


def test_a_corrupt_download_of_a_gzipped_set_places_nothing(tmp_path):
    corrupt = tmp_path / "sider.csv.gz"
    corrupt.write_bytes(gzip.compress(b"smiles,a\nCC,1\n")[:-6])  # gzip, truncated
    dest = tmp_path / "out"
    result = place("SIDER", "--url", corrupt.as_uri(), "--dest-dir", dest)
    assert_one_error(result, "77c0ef421f7cc8ce963c5836c8761fd2", "nothing placed")
    assert list(dest.iterdir()) == []


def test_the_gzip_path_verifies_the_packed_bytes_then_decompresses(tmp_path, monkeypatch):
    """The real sider.csv.gz is not available offline, so the script's own
    functions run with a stand-in mirror entry whose checksum is that of a
    gzip made here: the md5 of the .gz matches, the CSV inside is placed."""
    spec = importlib.util.spec_from_file_location("place_data", PLACE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    csv_bytes = b'smiles,"Injury, poisoning",Eye disorders\nCC,1,0\nCO,0,1\n'
    packed = tmp_path / "sider.csv.gz"
    packed.write_bytes(gzip.compress(csv_bytes))
    md5 = hashlib.md5(packed.read_bytes()).hexdigest()
    variant = module.Variant(
        "a stand-in sider.csv.gz", "md5", md5, module.ALL_BUT_SMILES, gzip=True
    )
    monkeypatch.setitem(module.DATASETS, "SIDER", module.Dataset("sider.csv.gz", (variant,)))

    destination = tmp_path / "SIDER.csv"
    done, matched = module.place("SIDER", packed.as_uri(), True, destination)
    assert matched is variant and done.startswith("placed") and "decompressed" in done
    assert destination.read_bytes() == csv_bytes
    words = shlex.split(module.training_command(destination, matched))
    assert flag_values(words, "--label-column") == ["Injury, poisoning", "Eye disorders"]

    # a checksum that matches a gzip that does not decompress: an error, the placed file kept
    broken = tmp_path / "broken.gz"
    broken.write_bytes(packed.read_bytes()[:-6])
    bad = module.Variant(
        "a stand-in",
        "md5",
        hashlib.md5(broken.read_bytes()).hexdigest(),
        module.ALL_BUT_SMILES,
        gzip=True,
    )
    monkeypatch.setitem(module.DATASETS, "SIDER", module.Dataset("sider.csv.gz", (bad,)))
    with pytest.raises(SystemExit, match="^error: .*does not decompress.*nothing placed$"):
        module.place("SIDER", broken.as_uri(), True, destination)
    assert destination.read_bytes() == csv_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SIDER.csv", "broken.gz", "sider.csv.gz"]


def test_trimmed_esol_from_a_path_names_its_short_column(tmp_path):
    source = shared_dataset("ESOL.csv")
    result = place("ESOL", "--from", source, "--dest-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ESOL.csv").read_bytes() == source.read_bytes()
    assert (
        "sha256 9e2bf77f3fc2d0ced4572341e2094904b992c9edf3762795f77cfc2bfd4de5ac verified"
        in result.stdout
    )
    words = command_line(result.stdout)
    assert flag_values(words, "--label-column") == ["logSolubility"]
    assert "--label-column logSolubility" in result.stdout
    assert (
        "measured log solubility" not in result.stdout
    )  # the mirror's name would not be in this file


def test_trimmed_sider_from_a_url_names_all_27_label_columns(tmp_path):
    source = shared_dataset("SIDER.csv")
    result = place("SIDER", "--url", source.as_uri(), "--dest-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    placed = tmp_path / "SIDER.csv"
    assert placed.read_bytes() == source.read_bytes()
    with open(placed, newline="") as f:
        header = next(csv.reader(f))
    words = command_line(result.stdout)
    labels = flag_values(words, "--label-column")
    assert len(labels) == 27
    assert labels == [c for c in header if c != "smiles"]
    assert "Neoplasms_benign,_malignant_and_unspecified_(incl_cysts_and_polyps)" in labels


def test_a_file_of_another_set_is_refused(tmp_path):
    source = shared_dataset("HIV.csv")
    result = place("ESOL", "--from", source, "--dest-dir", tmp_path)
    assert_one_error(result, str(source), "0c90a51668d446b9e3ab77e67662bd1c", "this file is HIV")
    assert list(tmp_path.iterdir()) == []


def test_a_url_that_does_not_exist_is_one_error_line(tmp_path):
    result = place("HIV", "--url", "file:///nonexistent", "--dest-dir", tmp_path)
    assert_one_error(result, "file:///nonexistent", "--from PATH")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_name_is_refused(tmp_path):
    result = place("Tox21", "--dest-dir", tmp_path)
    assert result.returncode == 2
    assert "invalid choice: 'Tox21'" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)
def test_training_on_a_set_not_yet_placed_says_how_to_place_it(tmp_path):
    missing = tmp_path / "HIV.csv"
    result = subprocess.run(
        [sys.executable, str(DDP), str(missing), "--epochs", "1", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr[-2000:]
    assert str(missing) in errors[0] and "no such file" in errors[0]
    assert "place_data.py" in errors[0]


def test_a_file_edited_by_hand_is_not_replaced_without_force(tmp_path):
    edited = tmp_path / "BBBP.csv"
    edited.write_bytes(BBBP.read_bytes() + b"9999,mine,1,CCO\n")  # a row the user added
    result = place("BBBP", "--from", BBBP, "--dest-dir", tmp_path)
    assert_one_error(result, "not a known copy of BBBP", "--force")
    assert edited.read_bytes().endswith(b"9999,mine,1,CCO\n")
    forced = place("BBBP", "--from", BBBP, "--dest-dir", tmp_path, "--force")
    assert forced.returncode == 0, forced.stderr
    assert edited.read_bytes() == BBBP.read_bytes()
