"""Logging from many processes: rank 0 tells the story on the console, every
rank's warnings reach it tagged with the rank, and each rank keeps its own
file `OUTPUT_DIR/logs/rank{r}.log` (never one file shared by writers), with
the tracebacks of the errors that the console shows as one line. What is
logged before the run's folder exists (reading and checking the data) is
held and written to the file once it is opened."""

import logging
import sys

log = logging.getLogger("partorch")


def setup_logging(rank=0, quiet=False):
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(f"[rank{rank}] %(message)s"))
    console.setLevel(logging.WARNING if quiet or rank != 0 else logging.INFO)
    # a traceback goes to the rank's file only: the console gets the error's one line
    console.addFilter(lambda record: not record.exc_info)
    log.handlers[:] = [console, _EarlyRecords()]
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def add_log_file(directory, rank=0):
    handler = logging.FileHandler(directory / f"rank{rank}.log", mode="a")
    handler.setFormatter(logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s"))
    handler.setLevel(logging.INFO)
    for early in [h for h in log.handlers if isinstance(h, _EarlyRecords)]:
        for record in early.records:
            handler.handle(record)
        log.removeHandler(early)
    log.addHandler(handler)


class _EarlyRecords(logging.Handler):
    """Holds the records logged before the rank's file is opened (start-up: the data read,
    its warnings, each phase's time), so that the file tells the whole run."""

    LIMIT = 10_000  # a run that never opens its file must not hold records without end

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        if len(self.records) < self.LIMIT:
            self.records.append(record)
