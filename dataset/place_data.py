"""Place a MoleculeNet data set in this folder as NAME.csv, verified by checksum,
and print the training command with the columns it needs.

    python dataset/place_data.py HIV                          # download from the MoleculeNet mirror
    python dataset/place_data.py HIV --from /path/to/HIV.csv  # copy a local file instead
    python dataset/place_data.py SIDER --url URL              # download from another address

The checksum is taken of the file as fetched, before any decompression (the
mirror serves SIDER gzipped), and must be one this script knows for NAME: the
mirror's original (MD5, long column names) or a trimmed copy with short column
names (sha256). The file goes to a temporary file in the destination folder and
is renamed into place only once verified, so a bad download places nothing and
never replaces a good file. Standard library only: it runs before anything is
installed.
"""

import argparse
import csv
from dataclasses import dataclass
import filecmp
import gzip
import hashlib
import http.client
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
        with open(placed, "rb+") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(placed, destination)
    return f"placed {shown(destination)} from {source} ({verified})", variant


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
        choices=list(DATASETS),
        help="data set (default: the one the --from or --url file is named after, else BBBP)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from", dest="path", metavar="PATH", help="copy this local file instead of downloading"
    )
    source.add_argument("--url", help=f"download from this URL instead of the mirror ({MIRROR})")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a NAME.csv already there whose checksum this script does not know",
    )
    parser.add_argument(
        "--dest-dir", type=Path, default=HERE, help="where to place NAME.csv (default: this folder)"
    )
    return parser


def main():
    args = build_parser().parse_args()
    source = args.path or args.url
    name = args.name or (infer_name(source) if source else "BBBP")
    if name is None:
        fail(f"cannot tell which data set {source} is: name it ({', '.join(DATASETS)})")
    try:
        args.dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {args.dest_dir}: {_reason(exc)}")
    try:
        done, variant = place(
            name, source, args.url is not None, args.dest_dir / f"{name}.csv", args.force
        )
    except (
        OSError
    ) as exc:  # the folder is not writable, the name is taken by a folder, the disk is full
        fail(f"cannot place {name}.csv in {args.dest_dir}: {_reason(exc)}; nothing placed")
    print(done)
    print("train on it with:")
    print(training_command(args.dest_dir / f"{name}.csv", variant))


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
