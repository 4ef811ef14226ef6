"""RDKit's work on every molecule of a data set (canonical SMILES, scaffolds, descriptors,
Morgan counts, a prepared corpus's tokens), chunk by chunk: in this process for a small set,
over a pool of the node's cores for a large one, and under a progress bar on rank 0's
terminal. With the cache (molecules/cached.py), one process of the node does this work and
the others wait for it, so it may take every core; where the cache cannot be locked, every
process does it, each over its share of the cores (distributed.pool_cores)."""

from contextlib import contextmanager
import logging
import os

from ..ddp.distributed import map_in_processes, pool_cores
from ..ddp.logs import log

# Below this many molecules one process finishes before a pool has started: a pool process
# imports partorch, and with it torch, first (seconds on 2 cores), and canonical SMILES,
# scaffolds and Morgan counts take about 0.3 ms a molecule (RDKit's descriptors take up to
# 10 ms: features.py pools those from fewer molecules).
POOL_MIN_MOLECULES = 20_000
# Molecules per task: seconds of work against the milliseconds of sending a chunk, and tasks
# enough on HIV (41) to keep 16 processes busy to the end. Also the progress bar's step, so
# the bar costs nothing per molecule.
CHUNK = 1_000
# Processes of a pool at most: each costs hundreds of MB for its imports.
MAX_WORKERS = 16
# Below this many molecules start-up takes seconds: no bar, so small runs look as they always did.
PROGRESS_MIN_MOLECULES = 10_000


def pool_workers(count, chunk=None, least=None, most=None):
    """How many processes work on `count` molecules in chunks of `chunk` (default CHUNK) from
    `least` molecules on (default POOL_MIN_MOLECULES); 1: this one. At most `most`, by default
    the cores this process may take (pool_cores) up to MAX_WORKERS."""
    chunk, least = chunk or CHUNK, POOL_MIN_MOLECULES if least is None else least
    if count < least:
        return 1
    most = most or min(pool_cores(), MAX_WORKERS)
    return max(1, min(most, -(-count // chunk)))


def in_chunks(function, items, *args, description, chunk=None, least=None, most=None):
    """[function(items[i : i + chunk], *args) for each chunk], in order; `function` must be a
    module's top-level function, not the script's (a pool process imports it by name). From
    `least` items on, over a pool of at most `most` processes (see pool_workers), spawned, not
    forked, as map_in_processes says. No items make one empty chunk: the caller gets
    function's own empty result."""
    chunk = chunk or CHUNK
    chunks = [items[i : i + chunk] for i in range(0, max(len(items), 1), chunk)]
    workers = pool_workers(len(items), chunk, least, most)
    if workers > 1:
        log.info("%s: over a pool of %d processes", description, workers)
        repeated = ([argument] * len(chunks) for argument in args)
        results = map_in_processes(function, chunks, *repeated, workers=workers)
    else:
        results = (function(part, *args) for part in chunks)
    done = []
    with _progress(len(items), description) as advance:
        for part, result in zip(chunks, results, strict=True):  # strict: the pool ends here
            done.append(result)
            advance(len(part))
    return done


def joined(function, items, *args, description, **options):
    """in_chunks of a function that returns a list per chunk, as one list."""
    return [
        x
        for part in in_chunks(function, items, *args, description=description, **options)
        for x in part
    ]


def shows_progress(count):
    """Whether a bar over `count` molecules is drawn: only for inputs big enough to wait for,
    and only on the process that prints, rank 0 (torchrun sets RANK; a lone process has none),
    unless --quiet left its console warnings only (see setup_logging). tqdm's disable=None
    then keeps it off anything but a terminal (log files, SLURM .out files, CI)."""
    quiet = any(type(h) is logging.StreamHandler and h.level > logging.INFO for h in log.handlers)
    return count >= PROGRESS_MIN_MOLECULES and os.environ.get("RANK", "0") == "0" and not quiet


@contextmanager
def _progress(total, description):
    """A function that advances a bar of `total` molecules, or does nothing when no bar shows."""
    if not shows_progress(total):
        yield lambda done: None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=description, unit="mol", disable=None) as bar:
        yield bar.update
