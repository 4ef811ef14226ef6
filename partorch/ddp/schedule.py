"""The learning rate over a run: a linear warmup, then constant or a cosine
decay to zero at the last epoch, stepped once per optimizer step. Its state
(the steps taken, and the curve's lengths) goes into the snapshot, so a
resumed run continues the same curve, even with another --epochs."""

import math

from torch.optim.lr_scheduler import LambdaLR

LR_SCHEDULES = ("constant", "cosine")


def lr_schedule(optimizer, kind, *, warmup_epochs, epochs, steps_per_epoch):
    """A LambdaLR on `optimizer`; call its step() after every optimizer step."""
    if kind not in LR_SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}: choose one of {', '.join(LR_SCHEDULES)}")
    factor = _Factor(kind, round(warmup_epochs * steps_per_epoch), epochs * steps_per_epoch)
    return LambdaLR(optimizer, factor)


class _Factor:
    """The rate's multiplier at a step. An object, not a closure: LambdaLR saves an object's
    attributes in its state_dict, so the lengths travel with the snapshot."""

    def __init__(self, kind, warmup, total):
        self.kind, self.warmup, self.total = kind, warmup, total

    def __call__(self, step):
        if step < self.warmup:  # from 1/warmup of the rate, not 0: the first step must move
            return (step + 1) / self.warmup
        if self.kind == "constant":
            return 1.0
        progress = min((step - self.warmup) / max(self.total - self.warmup, 1), 1.0)
        return 0.5 * (1 + math.cos(math.pi * progress))
