"""Place a data set in this folder, verified, and print the commands that use it.

    python dataset/place_data.py HIV                          # download from the MoleculeNet mirror
    python dataset/place_data.py HIV --from /path/to/HIV.csv  # copy a local file instead
    python dataset/place_data.py SIDER --url URL              # download from another address
    python dataset/place_data.py MOSES                        # the MOSES pretraining corpus
    python dataset/place_data.py MOSES --from FOLDER          # from local copies of its two files

MoleculeNet sets (BBBP, HIV, SIDER, ESOL, Lipophilicity) are placed as NAME.csv. The checksum
is taken of the file as fetched, before any decompression (the mirror serves SIDER gzipped),
and must be one this script knows for NAME: the mirror's original (MD5, long column names) or
a trimmed copy with short column names (sha256). The training command printed names the
columns to pass.

MOSES is placed as two files, MOSES_train.csv.gz (1,584,663 molecules) and MOSES_test.csv.gz
(176,074), one column SMILES, gzip-compressed; the commands printed prepare and pretrain on
them. By default they are downloaded from the MOSES project's data/train.csv and data/test.csv
on GitHub; --url names another folder address holding those two files. --from names a local
folder holding, for each of train and test, MOSES_train.csv.gz (this project's copy),
train.csv.gz or train.csv (the MOSES project's file), the first found. A gzip copy with this
project's sha256 is verified by checksum. Anything else (the MOSES project's plain CSV
included: it publishes no checksum to verify here) is checked by its content instead: the
header must be exactly SMILES and the number of molecules exactly that of the split; the output
says the checksum was not verified. A plain CSV is gzipped into place, its bytes unchanged.
Both files are fetched and checked before either is placed.

A file goes to a temporary file in the destination folder and is renamed into place only once
verified, so a bad download places nothing and never replaces a good file. Without --from or
--url, a file already there that is recognised (by its checksum; for MOSES, also by its
content, as one placed from the MOSES project's CSV) is left alone and nothing is fetched. A
file already there that is not a known copy (edited by hand, say) is replaced only with
--force. Standard library only: it runs before anything is installed.
"""

import argparse
import csv
from dataclasses import dataclass
import filecmp
import gzip
import hashlib
import http.client
import io
import os
from pathlib import Path
import shlex
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
import zlib

MIRROR = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/"
HERE = Path(__file__).resolve().parent
TRAINING_SCRIPT = HERE.parent / "scripts" / "basic_neural_network_ddp.py"
SMILES_COLUMN = "smiles"
ALL_BUT_SMILES = None  # label columns: every column of the placed file except the SMILES
MOSES = "MOSES"
# The MOSES project's files are stored with Git LFS: this address serves their content, not the
# LFS pointer that github.com/.../raw/... would.
MOSES_FILES = "https://media.githubusercontent.com/media/molecularsets/moses/master/data/"
PREPARE_SCRIPT = HERE.parent / "scripts" / "prepare_data.py"
PRETRAIN_SCRIPT = HERE.parent / "scripts" / "pretrain_ddp.py"


@dataclass(frozen=True)
class Variant:
    """One file known for a data set: how to recognise it and which columns to train on."""

    what: str
    algorithm: str  # "md5" or "sha256"
    checksum: str
    labels: tuple  # or ALL_BUT_SMILES, read from the placed file's header
    gzip: bool = False  # the fetched file is gzip; the CSV is inside


@dataclass(frozen=True)
class Dataset:
    mirror_file: str
    variants: tuple


def _mirror(file, md5, labels, gzipped=False):
    return Variant(f"the MoleculeNet mirror's {file}", "md5", md5, labels, gzipped)


def _trimmed(name, sha256, labels):
    return Variant(f"a copy of {name}.csv with short column names", "sha256", sha256, labels)


DATASETS = {
    "BBBP": Dataset(
        "BBBP.csv",
        (
            _mirror("BBBP.csv", "66286cb9e6b148bd75d80c870df580fb", ("p_np",)),
            # the same bytes, by the sha256 the project has always checked
            Variant(
                "BBBP.csv as it ships with this project",
                "sha256",
                "d07a38487aeac5cee5508413e468043ef3097451d2a112701c2d60be9ec6b662",
                ("p_np",),
            ),
        ),
    ),
    "HIV": Dataset(
        "HIV.csv",
        (
            _mirror("HIV.csv", "9ad10c88f82f1dac7eb5c52b668c30a7", ("HIV_active",)),
            _trimmed(
                "HIV",
                "3a3c7a4ea9626211fe959ef988394670dd76d556ca3c6173b70c88256e4c3555",
                ("HIV_active",),
            ),
        ),
    ),
    "SIDER": Dataset(
        "sider.csv.gz",
        (
            _mirror(
                "sider.csv.gz", "77c0ef421f7cc8ce963c5836c8761fd2", ALL_BUT_SMILES, gzipped=True
            ),
            _trimmed(
                "SIDER",
                "87b937d1ddb1879bb14e8f23d94ceffcb9ad3e534ae59602820b3bcf03844fbf",
                ALL_BUT_SMILES,
            ),
        ),
    ),
    "ESOL": Dataset(
        "delaney-processed.csv",
        (
            _mirror(
                "delaney-processed.csv",
                "0c90a51668d446b9e3ab77e67662bd1c",
                ("measured log solubility in mols per litre",),
            ),
            _trimmed(
                "ESOL",
                "9e2bf77f3fc2d0ced4572341e2094904b992c9edf3762795f77cfc2bfd4de5ac",
                ("logSolubility",),
            ),
        ),
    ),
    "Lipophilicity": Dataset(
        "Lipophilicity.csv",
        (
            _mirror("Lipophilicity.csv", "85a0e1cb8b38b0dfc3f96ff47a57f0ab", ("exp",)),
            _trimmed(
                "Lipophilicity",
                "aa9bd9669188e35efd908758a75561bba402016d901fed2d0d949289abbcf31c",
                ("lipo",),
            ),
        ),
    ),
}


@dataclass(frozen=True)
class Split:
    """One file of the MOSES corpus: how many molecules it holds and this project's checksum."""

    name: str  # "train" or "test", as the MOSES project names its file (train.csv)
    rows: int  # molecules below the header
    sha256: str  # of this project's gzip copy, MOSES_<name>.csv.gz

    @property
    def placed_name(self):
        return f"MOSES_{self.name}.csv.gz"

    def local_names(self):
        """The file names --from looks for, best first: a copy with a checksum to verify first."""
        return (self.placed_name, f"{self.name}.csv.gz", f"{self.name}.csv")


MOSES_SPLITS = (
    Split("train", 1_584_663, "786f0313aa6b9ba5514df685f885742a70ea8d86f1a4fa48115f7f80a634265c"),
    Split("test", 176_074, "f896fbf3764f88d94670b9959e5872c600c12152a18233823e820761b7a791b2"),
)


def fail(message):
    """One `error: ...` line on stderr, exit status 2."""
    raise SystemExit(f"error: {message}")  # the __main__ block below writes it and exits 2


def checksums(path):
    """{"md5": ..., "sha256": ...} of a file, in one pass."""
    digests = {"md5": hashlib.md5(usedforsecurity=False), "sha256": hashlib.sha256()}
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            for digest in digests.values():
                digest.update(block)
    return {algorithm: digest.hexdigest() for algorithm, digest in digests.items()}


def identify(name, found, plain_only=False):
    """The variant of data set `name` whose checksum is in `found`, or None."""
    for variant in DATASETS[name].variants:
        if found[variant.algorithm] == variant.checksum and not (plain_only and variant.gzip):
            return variant
    return None


def _reason(exc):
    reason = getattr(exc, "reason", exc)  # URLError wraps the cause
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(exc).__name__


def fetch(source, is_url, target):
    """Copy `source` (a URL, or a local path) to the file `target`."""
    if not is_url:
        try:
            shutil.copyfile(source, target)
        except OSError as exc:
            fail(f"cannot copy {source}: {_reason(exc)}")
        return
    try:
        with urllib.request.urlopen(source, timeout=60) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        fail(
            f"download of {source} failed ({_reason(exc)}); "
            "download it some other way and pass the file with --from PATH"
        )


def decompress(source, packed, target):
    try:
        with gzip.open(packed, "rb") as inside, open(target, "wb") as out:
            shutil.copyfileobj(inside, out)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        fail(
            f"{source}: its checksum matches, but it does not decompress as gzip ({exc}); "
            "nothing placed"
        )


def header(path):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        fail(f"{path}: cannot read its header ({exc})")


def label_columns(path, variant):
    columns = header(path)
    if SMILES_COLUMN not in columns:
        fail(f"{path}: no column {SMILES_COLUMN!r}; the columns are {columns}")
    if variant.labels is ALL_BUT_SMILES:
        return [c for c in columns if c != SMILES_COLUMN]
    missing = [c for c in variant.labels if c not in columns]
    if missing:
        fail(f"{path}: no column {missing[0]!r}; the columns are {columns}")
    return list(variant.labels)


def shown(path):
    """A path as the user can type it from here: relative when below the current folder."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def training_command(destination, variant):
    words = [
        "torchrun",
        "--master_port",
        "31133",
        shown(TRAINING_SCRIPT),
        shown(destination),
        "--smiles-column",
        SMILES_COLUMN,
        "--label-column",
        *label_columns(destination, variant),
    ]
    return " ".join(shlex.quote(w) for w in words)


def _expected(name):
    return " or ".join(f"{v.algorithm} {v.checksum} ({v.what})" for v in DATASETS[name].variants)


def _mismatch(name, source, found):
    message = (
        f"{source}: checksum md5 {found['md5']}, sha256 {found['sha256']}; "
        f"expected for {name}: {_expected(name)}; nothing placed"
    )
    others = [other for other in DATASETS if other != name and identify(other, found)]
    if others:
        message += f" (this file is {others[0]}: pass {others[0]} as the name)"
    fail(message)


def place(name, source, is_url, destination, force=False):
    """Fetch, verify and place; returns (what was done, the variant placed)."""
    explicit = source is not None
    if not explicit:
        source, is_url = MIRROR + DATASETS[name].mirror_file, True
    existing = (
        identify(name, checksums(destination), plain_only=True) if destination.is_file() else None
    )
    if existing and not explicit:
        return (
            f"{shown(destination)} is already in place ({existing.algorithm} verified: "
            f"{existing.what})",
            existing,
        )
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{name}.") as work:
        fetched = Path(work) / "fetched"
        fetch(source, is_url, fetched)
        found = checksums(fetched)
        variant = identify(name, found)
        if variant is None:
            _mismatch(name, source, found)
        verified = f"{variant.algorithm} {variant.checksum} verified: {variant.what}"
        placed = fetched
        if variant.gzip:
            placed = Path(work) / "decompressed"
            decompress(source, fetched, placed)
            verified += ", decompressed"
        label_columns(placed, variant)  # the columns the hint will name are there
        if destination.is_file() and filecmp.cmp(placed, destination, shallow=False):
            return (
                f"{shown(destination)} is already in place, identical to {source} ({verified})",
                variant,
            )
        if (
            destination.is_file() and existing is None and not force
        ):  # perhaps edited by hand: never lost silently
            fail(
                f"{shown(destination)} exists and is not a known copy of {name}; move it away, or "
                "pass --force to replace it; nothing placed"
            )
        move_into_place(placed, destination)
    return f"placed {shown(destination)} from {source} ({verified})", variant


def move_into_place(path, destination):
    with open(path, "rb+") as f:
        os.fsync(f.fileno())  # the bytes are on disk before the name points at them
    os.replace(path, destination)


# MOSES: two large files, checked while they stream, placed together


class NotMoses(Exception):
    """A file whose content is not the MOSES split it should be; the message says how."""


def _moses_header(line):
    if line.startswith(b"\x1f\x8b"):  # gzip's magic number, in a file named .csv
        raise NotMoses("it is gzip-compressed; its name should end in .gz")
    try:
        columns = next(csv.reader([line.decode("utf-8-sig")]), [])
    except (UnicodeDecodeError, csv.Error):
        raise NotMoses("its first line is not text") from None
    if columns == ["SMILES", "SPLIT"]:
        raise NotMoses(
            "its header is SMILES,SPLIT: MOSES's file of all splits together; expected the split "
            "files, train.csv and test.csv (or MOSES_train.csv.gz and MOSES_test.csv.gz)"
        )
    if columns != ["SMILES"]:
        raise NotMoses(f"its header is {','.join(columns)!r}; expected one column, SMILES")


def moses_lines(lines, split):
    """`lines` (bytes) passed through while checking that they are MOSES's `split`: the header
    SMILES, then exactly split.rows molecules (blank lines, which CSV readers skip, are not
    counted). Raises NotMoses at a wrong header, or at the end for a wrong count. A generator,
    so 1.6M rows stream through without being held in memory."""
    lines = iter(lines)
    first = next(lines, None)
    if first is None:
        raise NotMoses("it is empty")
    _moses_header(first)
    yield first
    rows = 0
    for line in lines:
        rows += bool(line.strip())
        yield line
    if rows != split.rows:
        raise NotMoses(
            f"{rows:,} molecules below its header; MOSES {split.name} has {split.rows:,}"
        )


def source_lines(source, is_url):
    """The lines (bytes) of a URL or a local file as they arrive; a failure is one error line."""
    try:
        with urllib.request.urlopen(source, timeout=60) if is_url else open(source, "rb") as f:
            yield from f
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if is_url:
            fail(
                f"download of {source} failed ({_reason(exc)}); download it some other way and "
                "pass its folder with --from FOLDER; nothing placed"
            )
        fail(f"cannot read {source}: {_reason(exc)}; nothing placed")


def write_gzip(lines, target):
    """`lines` gzipped into `target`: no file name or time in the gzip header, so the same CSV
    gives the same bytes and placing it again finds the file already in place."""
    # Level 6, not 9: on MOSES 9 takes three times as long for a file 5 % smaller. The buffer
    # turns 1.6M small writes into a few large ones for zlib.
    with open(target, "wb") as raw, gzip.GzipFile("", "wb", 6, raw, mtime=0) as packed:
        with io.BufferedWriter(packed, 1 << 20) as out:
            for line in lines:
                out.write(line)


def gzip_problem(path, split):
    """Why the gzip file `path` is not MOSES's `split` by its content, or None when it is."""
    try:
        with gzip.open(path, "rb") as f:
            for _ in moses_lines(f, split):
                pass
    except NotMoses as exc:
        return str(exc)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        return f"it does not decompress as gzip ({exc})"
    return None


def _content_checked(split):
    return f"checked instead: header SMILES, {split.rows:,} molecules"


def stage_moses(split, source, is_url, work):
    """`split` from `source`, checked, as a gzip file in the folder `work`: (its path, how it was
    checked). A failed check is one error line, and the caller's temporary folder goes."""
    staged = work / split.placed_name
    if not is_url and source.endswith(".gz"):
        fetch(source, False, staged)
        found = checksums(staged)["sha256"]
        if found == split.sha256:
            return staged, f"sha256 {found} verified: this project's copy"
        problem = gzip_problem(staged, split)
        if problem:
            fail(f"{source}: {problem}; nothing placed")
        return staged, (
            f"checksum not verified: sha256 {found} is not this project's copy's; "
            f"{_content_checked(split)}"
        )
    if is_url:
        print(f"downloading {source} ...", flush=True)  # 60 MB: say why it takes a while
    try:
        write_gzip(moses_lines(source_lines(source, is_url), split), staged)
    except NotMoses as exc:
        fail(f"{source}: {exc}; nothing placed")
    return staged, (
        "checksum not verified: the MOSES project publishes none for its CSV files; "
        f"{_content_checked(split)}; gzipped"
    )


def moses_sources(folder, url):
    """{split: (source, is_url)}: the files in the local `folder`, else at the address `url`."""
    if folder is None:
        base = (url or MOSES_FILES).rstrip("/")
        if base.endswith((".csv", ".gz")):
            fail(
                "for MOSES, --url is the address of a folder holding train.csv and test.csv, "
                "not of one file"
            )
        return {split: (f"{base}/{split.name}.csv", True) for split in MOSES_SPLITS}
    if not Path(folder).is_dir():
        fail(
            f"for MOSES, --from names a folder holding train.csv and test.csv (or "
            f"MOSES_train.csv.gz and MOSES_test.csv.gz); {folder} is not a folder"
        )
    return {split: (_local_file(Path(folder), split), False) for split in MOSES_SPLITS}


def _local_file(folder, split):
    for name in split.local_names():
        if (folder / name).is_file():
            return str(folder / name)
    fail(f"{folder} holds none of {', '.join(split.local_names())}; nothing placed")


def existing_moses(split, destination):
    """What is at `destination` already: None (nothing), "verified" (this project's checksum),
    "checked" (another checksum, but the split's content: a copy placed from the MOSES
    project's CSV) or "unknown" (perhaps edited by hand: never replaced without --force)."""
    if not destination.is_file():
        return None
    if checksums(destination)["sha256"] == split.sha256:
        return "verified"
    return "unknown" if gzip_problem(destination, split) else "checked"


def _already_there(split, existing):
    if existing == "verified":
        return f"sha256 {split.sha256} verified: this project's copy"
    return f"checksum not verified: not this project's copy; {_content_checked(split)}"


def _refuse_to_replace(destination, why):
    fail(
        f"{shown(destination)} exists and {why}; move it away, or pass --force to replace it; "
        "nothing placed"
    )


def place_moses(folder, url, dest_dir, force=False):
    """Fetch, check and place both MOSES files; a line for each saying what was done. Both are
    fetched and checked before either is placed, so a bad download places nothing."""
    explicit = folder is not None or url is not None
    done, todo = {}, []
    for split in MOSES_SPLITS:
        destination = dest_dir / split.placed_name
        existing = existing_moses(split, destination)
        if existing in ("verified", "checked") and not explicit:
            how = _already_there(split, existing)
            done[split] = f"{shown(destination)} is already in place ({how})"
        elif existing == "unknown" and not force:
            # refused before a long download, not after it
            _refuse_to_replace(destination, f"is not a known copy of MOSES {split.name}")
        else:
            todo.append((split, destination, existing))
    if todo:
        sources = moses_sources(folder, url)
        with tempfile.TemporaryDirectory(dir=dest_dir, prefix=".MOSES.") as work:
            done.update(_place_staged(todo, sources, Path(work), force))
    return [done[split] for split in MOSES_SPLITS]


def _place_staged(todo, sources, work, force):
    """Stage every file of `todo`, decide for each, and only then move any into place."""
    staged = {split: stage_moses(split, *sources[split], work) for split, _, _ in todo}
    done, moves = {}, []
    for split, destination, existing in todo:
        (path, how), source = staged[split], sources[split][0]
        if existing and filecmp.cmp(path, destination, shallow=False):
            done[split] = f"{shown(destination)} is already in place, identical to {source} ({how})"
        elif existing == "checked" and not force:  # a copy of MOSES, but perhaps not the same one
            _refuse_to_replace(destination, f"differs from {source}; it is not this project's copy")
        else:
            moves.append((path, destination))
            done[split] = f"placed {shown(destination)} from {source} ({how})"
    for path, destination in moves:
        move_into_place(path, destination)
    return done


def pretraining_commands(dest_dir):
    """The commands that prepare the placed corpus once and pretrain on it."""
    train, test = (dest_dir / split.placed_name for split in MOSES_SPLITS)
    prepare = ["python", shown(PREPARE_SCRIPT)]
    commands = (
        [*prepare, shown(train), "--output-dir", "data/moses_train"],
        [*prepare, shown(test), "--output-dir", "data/moses_test"]
        + ["--vocabulary-from", "data/moses_train", "--vocabulary", "fixed"],
        ["torchrun", "--standalone", "--nproc-per-node", "2", shown(PRETRAIN_SCRIPT)]
        + ["data/moses_train", "--held-out", "data/moses_test"],
    )
    return [" ".join(shlex.quote(w) for w in words) for words in commands]


def infer_name(source):
    """The data set a file or URL is named after (HIV.csv, sider.csv.gz, delaney-processed.csv), or
    None."""
    base = source.rstrip("/").rsplit("/", 1)[-1].lower()
    for name, dataset in DATASETS.items():
        if base in (f"{name.lower()}.csv", f"{name.lower()}.csv.gz", dataset.mirror_file.lower()):
            return name
    return None


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "name",
        nargs="?",
        choices=[*DATASETS, MOSES],
        help="data set (default: the one the --from or --url file is named after, else BBBP)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from",
        dest="path",
        metavar="PATH",
        help="copy this local file instead of downloading; for MOSES, a folder holding "
        "MOSES_train.csv.gz, train.csv.gz or train.csv, and the same for test",
    )
    source.add_argument(
        "--url",
        help=f"download from this URL instead of the mirror ({MIRROR}); for MOSES, the address "
        f"of a folder holding train.csv and test.csv (default: {MOSES_FILES})",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a file already there that this script does not recognise",
    )
    parser.add_argument(
        "--dest-dir", type=Path, default=HERE, help="where to place them (default: this folder)"
    )
    return parser


def place_and_show(name, source, args):
    """A MoleculeNet set: place NAME.csv and print the training command with its columns."""
    destination = args.dest_dir / f"{name}.csv"
    try:
        done, variant = place(name, source, args.url is not None, destination, args.force)
    except (
        OSError
    ) as exc:  # the folder is not writable, the name is taken by a folder, the disk is full
        fail(f"cannot place {name}.csv in {args.dest_dir}: {_reason(exc)}; nothing placed")
    print(done)
    print("train on it with:")
    print(training_command(destination, variant))


def place_and_show_moses(args):
    """MOSES: place both files and print the commands that prepare and pretrain on them."""
    try:
        done = place_moses(args.path, args.url, args.dest_dir, args.force)
    except OSError as exc:  # as for place_and_show
        names = " and ".join(split.placed_name for split in MOSES_SPLITS)
        fail(f"cannot place {names} in {args.dest_dir}: {_reason(exc)}; nothing placed")
    print("\n".join(done))
    print("prepare the corpus once, then pretrain on it, with:")
    print("\n".join(pretraining_commands(args.dest_dir)))


def main():
    args = build_parser().parse_args()
    source = args.path or args.url
    name = args.name or (infer_name(source) if source else "BBBP")
    if name is None:
        fail(f"cannot tell which data set {source} is: name it ({', '.join(DATASETS)}, {MOSES})")
    try:
        args.dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {args.dest_dir}: {_reason(exc)}")
    if name == MOSES:
        place_and_show_moses(args)
    else:
        place_and_show(name, source, args)


if __name__ == "__main__":
    try:
        main()
    except SystemExit as exc:
        if isinstance(exc.code, str):  # our `error: ...` line: status 2, as argparse's own errors
            sys.stderr.write(exc.code + "\n")
            sys.exit(2)
        raise
    except KeyboardInterrupt:
        sys.exit(130)
