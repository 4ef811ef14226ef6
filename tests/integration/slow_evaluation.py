"""Runs a training script with every evaluation pass slowed down, as on a
large dev split: `slow_evaluation.py SCRIPT ARGS...` with SLOW_EVALUATION_SECONDS
set. Before each pass the process writes its pid to SLOW_EVALUATION_MARKER
(when set), so a test can act on it while it evaluates. With EVALUATION_ERROR
set, the passes of rank EVALUATION_ERROR_RANK (default 0) fail with that message
instead (a PartorchError), as bad input met by one rank alone would."""

import os
from pathlib import Path
import runpy
import sys
import time

import partorch.ddp.errors
import partorch.ddp.evaluation

_predict = partorch.ddp.evaluation.predict


def slow_predict(*args, **kwargs):
    failing_rank = os.environ.get("EVALUATION_ERROR_RANK", "0")
    if os.environ.get("EVALUATION_ERROR") and os.environ.get("RANK", "0") == failing_rank:
        raise partorch.ddp.errors.PartorchError(os.environ["EVALUATION_ERROR"])
    if os.environ.get("SLOW_EVALUATION_MARKER"):
        Path(os.environ["SLOW_EVALUATION_MARKER"]).write_text(str(os.getpid()))
    time.sleep(float(os.environ.get("SLOW_EVALUATION_SECONDS", "0")))
    return _predict(*args, **kwargs)


partorch.ddp.evaluation.predict = slow_predict  # before the script imports it
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
