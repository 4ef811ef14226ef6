"""Runs a training script whose rank 0 sends SIGTERM to its torchrun agent
(its parent) right after optimizer step SIGTERM_AT_STEP (counted over the
run), as SLURM does to a preempted job: `sigterm_at_step.py SCRIPT ARGS...`.
The signal comes from inside, at a known step, so the test does not race the
training; the agent then forwards it to every worker, as it would any other."""

import os
import runpy
import signal
import sys

import torch

_step = torch.optim.AdamW.step
_taken = [0]


def step_then_signal(self, *args, **kwargs):
    result = _step(self, *args, **kwargs)
    _taken[0] += 1
    if os.environ.get("RANK", "0") == "0" and _taken[0] == int(os.environ["SIGTERM_AT_STEP"]):
        os.kill(os.getppid(), signal.SIGTERM)
    return result


torch.optim.AdamW.step = step_then_signal
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
