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
# Seconds a rank told to stop may take before it ends by itself. While training: half of
# torchrun's default --shutdown-timeout, for the next check and one snapshot. Elsewhere (start-
# up, scoring dev, the end of the run) a few: a rank there is past its epoch's last check or
# before its first, and torchrun also sends SIGTERM when it stops a job whose worker failed, so
# a rank stuck (scoring alone, waiting on a dead peer) must not hold up the restart until
# torchrun's SIGKILL. One told while rank 0 scores a small dev still stops at the epoch's end.
GRACE_SECONDS, GRACE_OUTSIDE_TRAINING_SECONDS = 15, 3


class Preemption:
    """Installs the SIGTERM handler; `watch(loader)` trains until the ranks agree to stop."""

    def __init__(self, every=CHECK_EVERY_STEPS):
        self.every = every
        self.training = False  # inside a training pass, where the checks are
        self.signalled = False  # this rank was told to stop
        self.stopped_at = None  # the step of the epoch after which all ranks stopped
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame):
        if not self.signalled:
            grace = GRACE_SECONDS if self.training else GRACE_OUTSIDE_TRAINING_SECONDS
            deadline = threading.Timer(grace, os._exit, args=(PREEMPTED_STATUS,))
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
        self.preemption.training = True
        try:
            for step, batch in enumerate(self.loader, start=self.start + 1):
                yield batch  # the loop trains this batch before asking for the next
                if step < last and step % self.preemption.every == 0 and self.preemption.agreed():
                    self.preemption.stopped_at = step
                    return
        finally:
            self.preemption.training = False
