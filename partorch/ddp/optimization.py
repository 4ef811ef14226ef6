"""The optimizer's steps over a run, for the loop that takes them: their
flags (the rate, weight decay, a schedule, clipping), the learning-rate
schedule (a linear warmup, then constant or a cosine decay to zero at the
last epoch, stepped once per optimizer step), gradient-norm clipping, and
the figures an epoch logs of them.

The schedule's state (the steps taken, and the curve's lengths) goes into
the snapshot, so a resumed run continues the same curve, even with another
--epochs."""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from .flags import FlagParser

LR_SCHEDULES = ("constant", "cosine")


def add_flags(group):
    """--lr, --weight-decay, --lr-schedule, --warmup-epochs and --clip-grad-norm."""
    add = group.add_argument
    add("--lr", type=FlagParser.positive(float), default=1e-3, help="peak learning rate")
    add("--weight-decay", type=FlagParser.non_negative(float), default=1e-4, help="AdamW decay")
    add("--lr-schedule", choices=LR_SCHEDULES, default="constant", help="after warmup")
    add(
        "--warmup-epochs",
        type=FlagParser.non_negative(float),
        default=0.0,
        help="epochs of linear warmup up to --lr (a fraction is fine)",
    )
    add(
        "--freeze-pretrained-epochs",
        type=FlagParser.non_negative(float),
        default=0.0,
        help="with a pretrained start (the ladder's --init-from): epochs that train only the "
        "new layers (pretrain_ddp.py has nothing to freeze)",
    )
    add(
        "--pretrained-lr-scale",
        type=FlagParser.positive(float),
        default=1.0,
        help="with a pretrained start: the pretrained layers' learning rate as a fraction of "
        "--lr (0.1: ten times lower than the new layers'; the same schedule for both)",
    )
    add(
        "--clip-grad-norm",
        type=FlagParser.positive(float),
        help="largest norm of a step's gradient (off by default)",
    )


def lr_schedule(optimizer, args, steps_per_epoch, total_steps=None):
    """A LambdaLR on `optimizer` from the flags of `add_flags` and --epochs (or `total_steps`,
    where a run stops sooner); call its step() after every optimizer step. With
    --freeze-pretrained-epochs, the parameters a model marked `pretrained` (see
    `mark_pretrained`) stay as loaded for that many epochs; with --pretrained-lr-scale they
    move to a group of their own at that fraction of the rate (see `_pretrained_group`)."""
    if args.lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown schedule {args.lr_schedule!r}: choose one of {LR_SCHEDULES}")
    scale = getattr(args, "pretrained_lr_scale", 1.0)
    if scale != 1.0:  # before LambdaLR: it takes each group's rate as its base
        _pretrained_group(optimizer, scale)
    warmup = round(args.warmup_epochs * steps_per_epoch)
    total = total_steps or args.epochs * steps_per_epoch
    scheduler = LambdaLR(optimizer, _Factor(args.lr_schedule, warmup, total))
    frozen_steps = round(getattr(args, "freeze_pretrained_epochs", 0) * steps_per_epoch)
    if frozen_steps:
        optimizer.register_step_pre_hook(_Freeze(scheduler, frozen_steps))
    return scheduler


def mark_pretrained(parameters):
    """Mark parameters loaded from a pretrained model, for --freeze-pretrained-epochs and
    --pretrained-lr-scale."""
    for parameter in parameters:
        parameter.pretrained = True


def _pretrained_group(optimizer, scale):
    """Move the pretrained parameters out of the optimizer's one group into a group of their own
    at `scale` times its rate, before the first step. Why: a lower rate for the encoder keeps
    more of what pretraining learnt while the new head, at the full rate, catches up. A resumed
    run builds the same two groups, so the snapshot's optimizer state loads into them."""
    (group,) = optimizer.param_groups
    pretrained = [p for p in group["params"] if getattr(p, "pretrained", False)]
    group["params"] = [p for p in group["params"] if not getattr(p, "pretrained", False)]
    optimizer.add_param_group({"params": pretrained, "lr": group["lr"] * scale})


class _Freeze:
    """An optimizer step pre-hook: while the schedule has taken fewer than `steps` steps (its
    count travels with the snapshot), the pretrained parameters' gradients are dropped, so
    the optimizer skips them: no update, no weight decay, no Adam moments. Their gradients
    are still computed and all-reduced: DDP expects a gradient for every parameter, and
    turning requires_grad off after the DDP wrap would leave them out of its buckets."""

    def __init__(self, scheduler, steps):
        self.scheduler, self.steps = scheduler, steps

    def __call__(self, optimizer, args, kwargs):
        if self.scheduler.last_epoch >= self.steps:
            return
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                if getattr(parameter, "pretrained", False):
                    parameter.grad = None


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


def clip_gradients(model, optimizer, scaler, max_norm):
    """With `max_norm`: the step's gradients unscaled (fp16) and clipped to it, and their norm
    before clipping, left on the device (no host sync a step); without: None. Under DDP the
    gradients are already averaged over the ranks, so every rank clips them alike."""
    if not max_norm:
        return None
    scaler.unscale_(optimizer)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def figures(optimizer, norms):
    """The epoch's row entries: the learning rate of the next step, and with clipping the mean
    norm before it (how far the limit cut in), fp16's skipped steps (inf gradients, no update)
    left out."""
    figures = {"lr": optimizer.param_groups[0]["lr"]}
    norms = [norm for norm in norms if norm is not None]
    if norms:
        norms = torch.stack(norms)
        figures["grad_norm"] = norms[norms.isfinite()].mean().item()
    return figures
