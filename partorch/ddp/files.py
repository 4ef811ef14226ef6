"""Files written whole or not at all: a crash, a kill or a full disk leaves
either the old file or the new one, never half of one. And the cache that runs share: its
folder, and the lock that lets one process of a node build what the others then read."""

from contextlib import contextmanager
import errno
import fcntl
import glob
import json
import os
from pathlib import Path
import tempfile
import time

import torch

from .logs import log


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


def cache_root():
    """Where training runs keep what they compute once for later runs (prepared corpora,
    molecules' features): $PARTORCH_CACHE, else $XDG_CACHE_HOME/partorch, else
    ~/.cache/partorch. Safe to delete: the next run rebuilds."""
    if os.environ.get("PARTORCH_CACHE"):
        return Path(os.environ["PARTORCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "partorch"


@contextmanager
def node_lock(path, report_after=5.0):
    """Hold an exclusive lock on the file `path` (created if absent) for the block: every
    process of a node may ask at once, the first builds, the others wait, then find it built."""
    with open(path, "a+") as handle:
        started, reported = time.monotonic(), False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not reported and time.monotonic() - started > report_after:
                    log.info("waiting for another process building %s", path.name)
                    reported = True
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
