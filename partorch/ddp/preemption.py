"""Stopping a job at a step every rank agrees on when it is told to end.

SLURM preempts, cancels or times out a job with SIGTERM (`#SBATCH --signal`
sends it ahead of the deadline); torchrun forwards it to its workers and
waits `--shutdown-timeout` seconds (30 by default) before it kills them.
Ranks receive the signal at different moments, so none may act on it alone:
a rank that left the training loop early would leave its peers waiting in
the next gradient all-reduce. Every few steps the ranks all-reduce "was I
told to stop?", and all stop after the same step, with time to write a
snapshot there."""

import os
import signal
import threading

import torch
import torch.distributed as dist

from .errors import PREEMPTED_STATUS, Preempted

# Steps between agreements: one tiny all-reduce, and the host waiting for it, every so often
# rather than every step; the job still stops within seconds of the signal.
CHECK_EVERY_STEPS = 10
# Half of torchrun's default --shutdown-timeout: time for the ranks to reach their next check
# and write one snapshot. A rank still alive after it is stuck (in work of its own, or waiting
# on a peer that died: torchrun also sends SIGTERM when it stops a job whose worker failed)
# and ends, rather than holding up torchrun's restart until its SIGKILL.
GRACE_SECONDS = 15


class Preemption:
    """Installs the SIGTERM handler; `watch(loader)` trains until the ranks agree to stop."""

    def __init__(self, every=CHECK_EVERY_STEPS, grace=GRACE_SECONDS):
        self.every, self.grace = every, grace
        self.signalled = False  # this rank was told to stop
        self.stopped_at = None  # the step of the epoch after which all ranks stopped
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame):
        if not self.signalled:
            deadline = threading.Timer(self.grace, os._exit, args=(PREEMPTED_STATUS,))
            deadline.daemon = True
            deadline.start()
        self.signalled = True

    def agreed(self):
        """Whether any rank was told to stop: a collective, so every rank must ask together."""
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        told = torch.tensor([float(self.signalled)], device=device)
        dist.all_reduce(told, op=dist.ReduceOp.MAX)
        return bool(told.item())

    def watch(self, loader, start=0):
        """`loader`'s batches, counted from `start` (those trained before a pause), until
        the ranks agree to stop; then `stopped_at` says after which step."""
        self.stopped_at = None
        return _Watched(self, loader, start)

    def stop(self, message):
        """The exception that ends the job once its snapshot is written."""
        return Preempted(
            f"stopped on SIGTERM {message}; run the same command with "
            "--resume auto (the same --output-dir) to continue from there"
        )


class _Watched:
    def __init__(self, preemption, loader, start):
        self.preemption, self.loader, self.start = preemption, loader, start
        self.dataset = loader.dataset

    def __iter__(self):
        last = self.start + len(self.loader)  # after the last step the epoch's end checks instead
        for step, batch in enumerate(self.loader, start=self.start + 1):
            yield batch  # the loop trains this batch before asking for the next
            if step < last and step % self.preemption.every == 0 and self.preemption.agreed():
                self.preemption.stopped_at = step
                return
