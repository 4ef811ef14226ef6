"""Runs a training script with faults injected at chosen points, for the
fault-injection suite (test_faults.py):

    FAULTS="RANK:POINT:EPOCH:ACTION[;...]" FAULT_DIR=DIR inject_faults.py SCRIPT ARGS...

POINT is where rank RANK meets the fault: `epoch` (the second optimizer
step of training epoch EPOCH), `evaluation` (rank 0 scoring dev after epoch
EPOCH), `snapshot` (halfway through writing epoch EPOCH's snapshot: half
its bytes are in the temporary file), `restart` (starting again after an
earlier fault: between the job's attempts) or `read` (reading a snapshot, EPOCH
ignored). ACTION is `kill` (SIGKILL), `stop` (SIGSTOP: alive to the kernel,
silent to its peers, for THAW_SECONDS) or, with `read`, `eio` (an I/O error,
as a flaky disk gives). Each fault
fires once per job: the first time, it leaves a file in FAULT_DIR.
"""

import errno
import io
import os
from pathlib import Path
import runpy
import signal
import subprocess
import sys

import torch

import partorch.ddp.evaluation
import partorch.ddp.sampler

FAULTS = [
    dict(zip(("rank", "point", "epoch", "action"), spec.split(":")), number=i)
    for i, spec in enumerate(os.environ["FAULTS"].split(";"))
]
FIRED = Path(os.environ["FAULT_DIR"])
RANK = os.environ.get("RANK", "0")
now = {"epoch": 0, "steps": 0}


def claim(point, epoch=None):
    """The fault this rank meets here, now marked as fired; None if none (or it fired before)."""
    for fault in FAULTS:
        if (
            fault["rank"] != RANK
            or fault["point"] != point
            or (epoch is not None and int(fault["epoch"]) != epoch)
        ):
            continue
        try:
            os.close(os.open(FIRED / str(fault["number"]), os.O_CREAT | os.O_EXCL))
            return fault
        except FileExistsError:
            continue  # fired in an earlier attempt


# A frozen process stays frozen this long: far past the suite's 5 s --dist-timeout, so its
# peers have given up on it and torchrun has sent it SIGTERM, which it then meets at once.
# Frozen for good, it would hold torchrun 30 s more, until its SIGKILL (a cost, not a check).
THAW_SECONDS = 15


def fire(fault):
    sys.stdout.flush()
    if fault["action"] == "stop":
        thaw = f"sleep {THAW_SECONDS}; kill -CONT {os.getpid()}"
        # a session of its own: torchrun stops a worker's whole process group, this one too
        subprocess.Popen(
            ["sh", "-c", thaw],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    os.kill(os.getpid(), signal.SIGKILL if fault["action"] == "kill" else signal.SIGSTOP)


def meet(point, epoch=None):
    fault = claim(point, epoch)
    if fault:
        fire(fault)


def patch(cls, name, before):
    original = getattr(cls, name)

    def patched(*args, **kwargs):
        before(*args, **kwargs)
        return original(*args, **kwargs)

    setattr(cls, name, patched)


def on_epoch(sampler, epoch, start=0):
    now.update(epoch=epoch, steps=0)


def on_step(*args, **kwargs):
    now["steps"] += 1
    if now["steps"] == 2:
        meet("epoch", now["epoch"])


_save = torch.save


def half_then_fault(obj, f, *args, **kwargs):
    fault = (
        claim("snapshot", obj["state"]["epoch"]) if isinstance(obj, dict) and "rng" in obj else None
    )
    if fault:
        buffer = io.BytesIO()
        _save(obj, buffer, *args, **kwargs)
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        f.flush()
        fire(fault)
        # a frozen writer that is thawed (its SIGTERM, handled by the FT rung, does not end
        # it) goes on writing as a real one would: the whole snapshot, not half of it twice
        f.seek(0)
        f.truncate()
    return _save(obj, f, *args, **kwargs)


_load = torch.load


def load_or_fail(f, *args, **kwargs):
    """Reading a snapshot (`read:0:eio`): the first read fails as a flaky disk would."""
    if str(f).endswith("last.pt") and claim("read"):
        raise OSError(errno.EIO, "Input/output error", str(f))
    return _load(f, *args, **kwargs)


if any(FIRED.iterdir()):
    meet("restart")
for sampler in (
    partorch.ddp.sampler.LengthBucketBatchSampler,
    partorch.ddp.sampler.DistributedRandomBatchSampler,
):
    patch(sampler, "set_epoch", on_epoch)
patch(torch.amp.GradScaler, "step", on_step)
patch(partorch.ddp.evaluation, "predict", lambda *a, **k: meet("evaluation", now["epoch"]))
torch.save = half_then_fault
torch.load = load_or_fail
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
