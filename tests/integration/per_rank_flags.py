"""Runs a script with extra flags on one rank, as a node started from an
older job script would: `RANK_1_FLAGS="--lr 0.01" per_rank_flags.py SCRIPT ARGS...`."""

import os
import runpy
import shlex
import sys

sys.argv = sys.argv[1:] + shlex.split(
    os.environ.get(f"RANK_{os.environ.get('RANK', '0')}_FLAGS", "")
)
runpy.run_path(sys.argv[0], run_name="__main__")
