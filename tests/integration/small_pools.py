"""Runs a script with its start-up's pools (chunked.in_chunks) taking chunks of 50 molecules
from the first molecule on, over 2 processes, so that a small data set takes the path a large
one does: `small_pools.py SCRIPT ARGS...`."""

import runpy
import sys

if __name__ == "__main__":
    from partorch.molecules import chunked, features

    chunked.POOL_MIN_MOLECULES = features.DESCRIPTORS_POOL_MIN = 0
    chunked.CHUNK = 50
    chunked.pool_cores = lambda: 2
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
