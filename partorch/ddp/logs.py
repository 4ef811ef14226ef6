"""Logging from many processes: rank 0 tells the story on the console, every
rank's warnings reach it tagged with the rank, and each rank keeps its own
file `OUTPUT_DIR/logs/rank{r}.log` (never one file shared by writers), with
the tracebacks of the errors that the console shows as one line."""

import logging
import sys

log = logging.getLogger("partorch")


def setup_logging(rank=0, quiet=False):
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(f"[rank{rank}] %(message)s"))
    console.setLevel(logging.WARNING if quiet or rank != 0 else logging.INFO)
    # a traceback goes to the rank's file only: the console gets the error's one line
    console.addFilter(lambda record: not record.exc_info)
    log.handlers[:] = [console]
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def add_log_file(directory, rank=0):
    handler = logging.FileHandler(directory / f"rank{rank}.log", mode="a")
    handler.setFormatter(logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s"))
    handler.setLevel(logging.INFO)
    log.addHandler(handler)
