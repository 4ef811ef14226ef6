"""dataset/place_data.py run for real: it verifies the checksum of the file it
fetches, places NAME.csv atomically (nothing on a mismatch, a good file never
replaced by a bad one), and prints the training command with the right
columns; the MOSES corpus (two large files, gzipped, checked by checksum or by
content); and the training script's error for a data set not yet placed."""

import csv
import dataclasses
import gzip
import hashlib
import shlex
import subprocess
import sys

from helpers import DDP, ROOT, error_lines, load_module, shared_dataset
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


@pytest.fixture
def place_data():
    """The script as a module of its own for this test, so that monkeypatching its constants
    reaches no other test."""
    return load_module(PLACE)


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


def test_the_gzip_path_verifies_the_packed_bytes_then_decompresses(
    tmp_path, monkeypatch, place_data
):
    """The real sider.csv.gz is not available offline, so the script's own
    functions run with a stand-in mirror entry whose checksum is that of a
    gzip made here: the md5 of the .gz matches, the CSV inside is placed."""
    module = place_data
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


# MOSES. The real files hold 1,584,663 and 176,074 molecules and cannot be downloaded here, so
# the tests that need the check to pass run the script's own functions in-process (main(), with
# its flags) with MOSES_SPLITS swapped for splits of a few molecules. The script offers no flag
# or variable for this: a user cannot loosen the row count by mistake, and the tests that run it
# as a subprocess (wrong counts, wrong headers, the real gzip copies) meet the real counts.
TRAIN_SHA256 = "786f0313aa6b9ba5514df685f885742a70ea8d86f1a4fa48115f7f80a634265c"
TEST_SHA256 = "f896fbf3764f88d94670b9959e5872c600c12152a18233823e820761b7a791b2"
MOLECULES = ["CCO", "c1ccccc1", "CC(=O)Nc1ccc(O)cc1", "CN1CCC[C@H]1c1cccnc1", "OC(=O)CCl"]
SMALL = {"train": 4, "test": 2}  # molecules in the stand-in splits


@pytest.fixture
def place_moses(place_data, monkeypatch, capsys):
    """`python dataset/place_data.py MOSES ARGS` as main() in-process, with MOSES splits of
    SMALL molecules (the checksums stay the real ones); returns its stdout."""
    splits = tuple(
        dataclasses.replace(split, rows=SMALL[split.name]) for split in place_data.MOSES_SPLITS
    )
    monkeypatch.setattr(place_data, "MOSES_SPLITS", splits)
    monkeypatch.chdir(ROOT)  # the printed paths are relative to where the script is run

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["place_data.py", "MOSES", *map(str, args)])
        place_data.main()
        return capsys.readouterr().out

    return run


def write_moses(folder, header="SMILES", newline="\n", shift=0):
    """train.csv and test.csv as the MOSES project serves them, SMALL molecules each; returns
    {name: bytes written}."""
    folder.mkdir(exist_ok=True)
    written = {}
    for name, rows in SMALL.items():
        smiles = [MOLECULES[(i + shift) % len(MOLECULES)] for i in range(rows)]
        written[name] = newline.join([header, *smiles, ""]).encode()
        (folder / f"{name}.csv").write_bytes(written[name])
    return written


def assert_one_error_in_process(excinfo, *expected):
    message = excinfo.value.code
    assert isinstance(message, str) and message.startswith("error: "), message
    assert "\n" not in message, message  # the __main__ block writes it as one line
    for text in expected:
        assert text in message, message


def placed_bytes(dest):
    return {p.name: gzip.decompress(p.read_bytes()) for p in sorted(dest.iterdir())}


def test_moses_from_a_folder_of_plain_csvs_is_gzipped_into_place_unverified(tmp_path, place_moses):
    written = write_moses(tmp_path / "moses", newline="\r\n")  # bytes kept as they are
    dest = tmp_path / "dest"
    out = place_moses("--from", tmp_path / "moses", "--dest-dir", dest)
    assert placed_bytes(dest) == {
        "MOSES_test.csv.gz": written["test"],
        "MOSES_train.csv.gz": written["train"],
    }  # and nothing else: no temporary file left behind
    assert out.count("checksum not verified: the MOSES project publishes none") == 2
    assert "checked instead: header SMILES, 4 molecules; gzipped" in out
    assert f"placed {dest / 'MOSES_train.csv.gz'} from {tmp_path / 'moses' / 'train.csv'}" in out
    commands = [line for line in out.splitlines() if line.startswith(("python ", "torchrun "))]
    assert commands == [
        f"python scripts/prepare_data.py {dest / 'MOSES_train.csv.gz'} --output-dir "
        "data/moses_train",
        f"python scripts/prepare_data.py {dest / 'MOSES_test.csv.gz'} --output-dir "
        "data/moses_test --vocabulary-from data/moses_train --vocabulary fixed",
        "torchrun --standalone --nproc-per-node 2 scripts/pretrain_ddp.py data/moses_train "
        "--held-out data/moses_test",
    ]
    assert "basic_neural_network_ddp.py" not in out  # not the classifier's command

    # again without a source: recognised by content, nothing fetched (there is no network here)
    again = place_moses("--dest-dir", dest)
    assert again.count("is already in place (checksum not verified") == 2
    assert "scripts/pretrain_ddp.py" in again
    # again from the same folder: gzipped the same way, byte for byte
    same = place_moses("--from", tmp_path / "moses", "--dest-dir", dest)
    assert same.count("is already in place, identical to") == 2


def test_moses_from_a_folder_address_is_streamed_into_place(tmp_path, place_moses):
    written = write_moses(tmp_path / "served")
    dest = tmp_path / "dest"
    url = (tmp_path / "served").as_uri()
    out = place_moses("--url", url, "--dest-dir", dest)
    assert f"downloading {url}/train.csv" in out and f"downloading {url}/test.csv" in out
    assert placed_bytes(dest) == {
        "MOSES_test.csv.gz": written["test"],
        "MOSES_train.csv.gz": written["train"],
    }
    assert out.count("checksum not verified") == 2


def test_moses_with_the_wrong_number_of_molecules_is_refused(tmp_path):
    """As users run it, with the real counts: a short file (a partial download) is refused."""
    write_moses(tmp_path / "moses")
    dest = tmp_path / "dest"
    result = place("MOSES", "--from", tmp_path / "moses", "--dest-dir", dest)
    assert_one_error(
        result,
        str(tmp_path / "moses" / "train.csv"),
        "4 molecules below its header; MOSES train has 1,584,663",
        "nothing placed",
    )
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize(
    "header, expected",
    [
        ("SMILES,SPLIT", ["MOSES's file of all splits together", "train.csv and test.csv"]),
        ("smiles", ["its header is 'smiles'; expected one column, SMILES"]),
    ],
)
def test_moses_with_a_wrong_header_is_refused(tmp_path, header, expected):
    write_moses(tmp_path / "moses", header=header)
    dest = tmp_path / "dest"
    result = place("MOSES", "--from", tmp_path / "moses", "--dest-dir", dest)
    assert_one_error(result, str(tmp_path / "moses" / "train.csv"), *expected, "nothing placed")
    assert list(dest.iterdir()) == []


def test_moses_a_bad_test_file_places_no_train_file_either(tmp_path, capsys, place_moses):
    write_moses(tmp_path / "moses")
    test_csv = tmp_path / "moses" / "test.csv"
    test_csv.write_bytes(test_csv.read_bytes() + b"CCN\n")  # one molecule too many
    dest = tmp_path / "dest"
    with pytest.raises(SystemExit) as excinfo:
        place_moses("--from", tmp_path / "moses", "--dest-dir", dest)
    assert_one_error_in_process(excinfo, "3 molecules below its header; MOSES test has 2")
    assert list(dest.iterdir()) == []  # train.csv was good, but is not placed alone
    assert capsys.readouterr().out == ""


def test_moses_gzip_copies_of_this_project_are_verified_by_checksum(tmp_path):
    shared_dataset("MOSES_train.csv.gz")
    folder = shared_dataset("MOSES_test.csv.gz").parent
    dest = tmp_path / "dest"
    result = place("MOSES", "--from", folder, "--dest-dir", dest)
    assert result.returncode == 0, result.stderr
    for name, sha256 in [("MOSES_train.csv.gz", TRAIN_SHA256), ("MOSES_test.csv.gz", TEST_SHA256)]:
        assert (dest / name).read_bytes() == (folder / name).read_bytes()  # placed as it is
        assert f"sha256 {sha256} verified: this project's copy" in result.stdout
    assert "not verified" not in result.stdout
    assert f"scripts/prepare_data.py {dest / 'MOSES_train.csv.gz'}" in result.stdout
    assert sorted(p.name for p in dest.iterdir()) == ["MOSES_test.csv.gz", "MOSES_train.csv.gz"]

    again = place("MOSES", "--dest-dir", dest)  # verified already: no download, still the hint
    assert again.returncode == 0, again.stderr
    assert f"is already in place (sha256 {TEST_SHA256} verified" in again.stdout
    assert "scripts/pretrain_ddp.py data/moses_train" in again.stdout


def test_moses_gzip_copies_of_unknown_checksum_are_checked_by_content(tmp_path, place_moses):
    written = write_moses(tmp_path / "moses")
    own = tmp_path / "moses" / "train.csv.gz"
    own.write_bytes(gzip.compress(written["train"]))  # preferred to train.csv beside it
    dest = tmp_path / "dest"
    out = place_moses("--from", tmp_path / "moses", "--dest-dir", dest)
    assert (dest / "MOSES_train.csv.gz").read_bytes() == own.read_bytes()  # placed as it is
    found = hashlib.sha256(own.read_bytes()).hexdigest()
    assert f"checksum not verified: sha256 {found} is not this project's copy's" in out

    own.write_bytes(own.read_bytes()[:-6])  # truncated: its checksum is unknown, and it is broken
    with pytest.raises(SystemExit) as excinfo:
        place_moses("--from", tmp_path / "moses", "--dest-dir", tmp_path / "other")
    assert_one_error_in_process(excinfo, str(own), "does not decompress as gzip", "nothing placed")
    assert list((tmp_path / "other").iterdir()) == []


def test_moses_a_file_edited_by_hand_is_not_replaced_without_force(tmp_path, place_moses):
    written = write_moses(tmp_path / "moses")
    dest = tmp_path / "dest"
    dest.mkdir()
    edited = dest / "MOSES_train.csv.gz"
    edited.write_bytes(gzip.compress(written["train"] + b"CCCC\n"))  # a molecule the user added
    before = edited.read_bytes()
    for source in (["--from", tmp_path / "moses"], []):  # without one: refused before a download
        with pytest.raises(SystemExit) as excinfo:
            place_moses(*source, "--dest-dir", dest)
        assert_one_error_in_process(excinfo, "not a known copy of MOSES train", "--force")
        assert edited.read_bytes() == before
        assert [p.name for p in dest.iterdir()] == ["MOSES_train.csv.gz"]  # test not placed
    place_moses("--from", tmp_path / "moses", "--dest-dir", dest, "--force")
    assert placed_bytes(dest)["MOSES_train.csv.gz"] == written["train"]


def test_moses_a_copy_checked_by_content_is_not_replaced_by_another_without_force(
    tmp_path, place_moses
):
    first = write_moses(tmp_path / "first")
    second = write_moses(tmp_path / "second", shift=1)  # other molecules, the same counts
    dest = tmp_path / "dest"
    place_moses("--from", tmp_path / "first", "--dest-dir", dest)
    with pytest.raises(SystemExit) as excinfo:
        place_moses("--from", tmp_path / "second", "--dest-dir", dest)
    assert_one_error_in_process(excinfo, "differs from", "not this project's copy", "--force")
    assert placed_bytes(dest)["MOSES_train.csv.gz"] == first["train"]
    place_moses("--from", tmp_path / "second", "--dest-dir", dest, "--force")
    assert placed_bytes(dest)["MOSES_train.csv.gz"] == second["train"]


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--from", "{tmp}/train.csv"], ["is not a folder", "train.csv and test.csv"]),
        (["--from", "{tmp}/empty"], ["holds none of MOSES_train.csv.gz, train.csv.gz, train.csv"]),
        (["--url", "https://example.org/data/train.csv"], ["not of one file"]),
    ],
)
def test_moses_from_a_file_or_an_empty_folder_is_one_error_line(tmp_path, flags, expected):
    write_moses(tmp_path)
    (tmp_path / "empty").mkdir()
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    dest = tmp_path / "dest"
    result = place("MOSES", *flags, "--dest-dir", dest)
    assert_one_error(result, *expected)
    assert list(dest.iterdir()) == []
