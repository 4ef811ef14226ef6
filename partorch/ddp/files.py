"""Files written whole or not at all: a crash, a kill or a full disk leaves
either the old file or the new one, never half of one."""

import errno
import glob
import json
import os
from pathlib import Path
import tempfile

import torch


def atomic_write(path, write):
    """Write to a temporary file beside `path`, fsync, rename it over `path`
    and fsync the folder, so a crash leaves either the old file or the new
    one, never half of one, and the rename itself survives a power cut.
    One writer per path (rank 0): temporaries that an earlier writer of the
    same path left behind when it was killed are removed first."""
    path = Path(path)
    # mkstemp's 8 random letters
    for stale in path.parent.glob(f".{glob.escape(path.name)}.{'?' * 8}.tmp"):
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # mkstemp's 0600 would hide the results from the user's group
            os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk, a quota: name the file (the write did not)
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    _fsync_folder(path.parent)


def _read_umask():
    # the only way to read it is to set it: once, at import, before any threads
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _fsync_folder(folder):
    if os.name != "posix":  # folders cannot be opened for fsync elsewhere
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems cannot sync a folder; the file itself is synced
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def atomic_torch_save(obj, path):
    atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_text(text, path):
    atomic_write(path, lambda f: f.write(text.encode()))


def atomic_write_json(obj, path):
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=2) + "\n").encode()))
