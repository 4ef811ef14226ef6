"""Runs a training script whose rank KILL_RANK dies by SIGKILL right after optimizer step
KILL_AT_STEP (counted over the attempt), in the job's first attempt only, as a node that
loses a worker would: `kill_at_step.py SCRIPT ARGS...`. The kill comes from inside, at a
known step, so the test does not race the training; torchrun then restarts the job."""

import os
import runpy
import signal
import sys

import torch

_step = torch.optim.AdamW.step
_taken = [0]


def step_then_die(self, *args, **kwargs):
    result = _step(self, *args, **kwargs)
    _taken[0] += 1
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if (
        first_attempt
        and os.environ.get("RANK") == os.environ["KILL_RANK"]
        and _taken[0] == int(os.environ["KILL_AT_STEP"])
    ):
        os.kill(os.getpid(), signal.SIGKILL)
    return result


torch.optim.AdamW.step = step_then_die
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
