"""Runs a training script whose rank 0 sends SIGTERM to its torchrun agent
(its parent) right after optimizer step SIGTERM_AT_STEP (counted over the
run), as SLURM does to a preempted job: `sigterm_at_step.py SCRIPT ARGS...`.
The signal comes from inside, at a known step, so the test does not race the
training; the agent then forwards it to every worker, as it would any other.
Rank 0 then waits a second, ample time for the agent to forward it, so that
the ranks' next check for a stop is sure to see it (a peer cannot run more than
a step ahead: it waits for rank 0 in the next gradient all-reduce)."""

import os
import runpy
import signal
import sys
import time

import torch

_step = torch.optim.AdamW.step
_taken = [0]


def step_then_signal(self, *args, **kwargs):
    result = _step(self, *args, **kwargs)
    _taken[0] += 1
    if os.environ.get("RANK", "0") == "0" and _taken[0] == int(os.environ["SIGTERM_AT_STEP"]):
        os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(1)  # a signal's handler does not cut it short (PEP 475)
    return result


torch.optim.AdamW.step = step_then_signal
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
