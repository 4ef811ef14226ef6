"""The learning rate over a run: a linear warmup, then constant or a cosine
decay to zero at the last epoch, stepped once per optimizer step. Its state
(the steps taken) goes into the snapshot, so a resumed run continues the
same curve."""

import math

from torch.optim.lr_scheduler import LambdaLR

LR_SCHEDULES = ("constant", "cosine")


def lr_schedule(optimizer, kind, *, warmup_epochs, epochs, steps_per_epoch):
    """A LambdaLR on `optimizer`; call its step() after every optimizer step."""
    if kind not in LR_SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}: choose one of {', '.join(LR_SCHEDULES)}")
    warmup = round(warmup_epochs * steps_per_epoch)
    total = epochs * steps_per_epoch

    def factor(step):
        if step < warmup:  # from 1/warmup of the rate, not 0: the first step must move
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
