"""Files written whole or not at all: a crash, a kill or a full disk leaves
either the old file or the new one, never half of one. And the cache that runs share: its
folder, and the lock that lets one process of a node build what the others then read."""

from contextlib import ExitStack, contextmanager
import errno
import fcntl
import glob
import json
import os
from pathlib import Path
import tempfile
import time

import torch

from .distributed import every_local_process_computes
from .logs import log


def atomic_write(path, write):
    """Write to a temporary file beside `path`, fsync, rename it over `path`
    and fsync the folder, so a crash leaves either the old file or the new
    one, never half of one, and the rename itself survives a power cut.
    One writer per path at a time (rank 0, or the holder of a node_lock): temporaries that an
    earlier writer of the same path left behind when it was killed are removed first."""
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
    """Where training runs keep what they compute once for later runs (prepared corpora; the
    canonical SMILES, scaffolds and features of a data set's molecules): $PARTORCH_CACHE, else
    $XDG_CACHE_HOME/partorch, else ~/.cache/partorch. Safe to delete: the next run rebuilds."""
    if os.environ.get("PARTORCH_CACHE"):
        return Path(os.environ["PARTORCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "partorch"


def kept_in_cache(path, compute, *, save, load, fits, what):
    """compute(), kept at `path` for later runs. A whole file is read without waiting (it is
    written atomically), so the ranks of a node read at once, and a cache others filled is read
    even where this user cannot write. On a miss, whichever process of the node takes the lock
    first computes and writes; the others wait, then read. save(value, file) writes, load(path)
    reads, fits(value) says whether what was read is whole: a damaged file, or one of another
    size, is computed again and replaced. A cache that cannot be written or locked (a full
    disk, a read-only home) costs the run nothing but the time. `what` names the value in
    the log."""
    value = _load_kept(path, load, fits, what, quiet=True)
    if value is not None:
        log.info("read %s from %s", what, path)
        return value
    with ExitStack() as locked:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            locked.enter_context(node_lock(path.with_name(f".{path.name}.lock")))
        except OSError as exc:
            log.warning("could not use the cache for %s: %s", what, exc)
            with every_local_process_computes():  # no lock: the node's processes all compute
                return compute()
        value = _load_kept(path, load, fits, what)  # another process may have written it
        if value is not None:
            log.info("read %s from %s", what, path)
            return value
        value = compute()
        try:
            atomic_write(path, lambda f: save(value, f))
            log.info("computed %s into %s", what, path)
        except OSError as exc:
            log.warning("could not keep %s in the cache: %s", what, exc)
        return value


def _load_kept(path, load, fits, what, quiet=False):
    """What `path` holds, or None where there is none or it is damaged. Any error counts as
    damage: the cache can always be computed again, and a damaged file raises whatever its
    reader meets first (zipfile, numpy's header parser, json's recursion limit)."""
    try:
        value = load(path)
        if fits(value):
            return value
        problem = f"not {what}"
    except FileNotFoundError:
        return None
    except Exception as exc:
        problem = f"unreadable ({type(exc).__name__}: {exc})"
    if not quiet:
        log.warning("%s: %s; computing it again", path, problem)
    return None


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
