"""Place a MoleculeNet CSV in this folder, verifying its sha256 checksum.

    python dataset/place_data.py HIV                          # download HIV
    python dataset/place_data.py HIV --from /path/to/HIV.csv  # copy a local file
    python dataset/place_data.py                              # BBBP (it also ships in this folder)

Standard library only, so it runs before anything is installed.
"""
import argparse
import hashlib
from pathlib import Path
import shutil
import sys
import tempfile
import urllib.request

MIRROR = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets"
CHECKSUMS = {
    "BBBP": "d07a38487aeac5cee5508413e468043ef3097451d2a112701c2d60be9ec6b662",
    "HIV": "3a3c7a4ea9626211fe959ef988394670dd76d556ca3c6173b70c88256e4c3555",
}
HERE = Path(__file__).resolve().parent


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(source, tmp):
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=60) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise SystemExit(f"error: download of {source} failed ({exc}); "
                             "copy the file from a local path with --from PATH instead")
    else:
        try:
            shutil.copyfile(source, tmp)
        except OSError as exc:
            raise SystemExit(f"error: cannot copy {source}: {exc.strerror}")


def place(name, source, destination):
    expected = CHECKSUMS[name]
    if destination.exists() and sha256(destination) == expected:
        print(f"{destination} is already in place (sha256 verified)")
        return
    with tempfile.TemporaryDirectory(dir=destination.parent) as tmpdir:
        tmp = Path(tmpdir) / destination.name
        fetch(source, tmp)
        actual = sha256(tmp)
        if actual != expected:
            raise SystemExit(f"error: {source} has sha256 {actual}, expected {expected} for {name}; "
                             "not placed")
        tmp.replace(destination)
    print(f"placed {destination} from {source} (sha256 verified)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", choices=sorted(CHECKSUMS),
                        help="data set (default: the --from file's name, else BBBP)")
    parser.add_argument("--from", dest="source", help="local file to copy instead of downloading")
    parser.add_argument("--dest-dir", type=Path, default=HERE, help="where to place it (default: this folder)")
    args = parser.parse_args()
    if args.name is None:
        stem = Path(args.source).stem if args.source else "BBBP"
        args.name = stem if stem in CHECKSUMS else "BBBP"
    args.dest_dir.mkdir(parents=True, exist_ok=True)
    place(args.name, args.source or f"{MIRROR}/{args.name}.csv", args.dest_dir / f"{args.name}.csv")


if __name__ == "__main__":
    sys.exit(main())
