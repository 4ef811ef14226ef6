"""The epoch loop shared by the single-process and the DDP script.

It works on a plain module or a DDP-wrapped one. Loss and throughput are
summed over all ranks; the dev set is scored on rank 0 only and the result is
broadcast, so every rank makes the same keep-best and early-stopping choice.
"""
from contextlib import nullcontext
from dataclasses import dataclass, field
import logging
import time

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from .checkpoint import CheckpointError, atomic_torch_save, capture_rng, restore_rng
from .distributed import (all_gather_object, all_reduce_sum, barrier, broadcast_object, get_rank, get_world_size,
                          is_master_process, unwrap)
from .errors import PartorchError
from .evaluation import EvaluationError, predict, score

log = logging.getLogger("partorch")


@dataclass
class TrainResult:
    best_state: dict
    best_epoch: int
    best_dev_roc_auc: float
    epochs_completed: int
    train_samples_per_second: float
    history: list = field(default_factory=list)


def set_epoch(loader, epoch):
    # Without this a DistributedSampler (and our bucket sampler) would
    # replay the first epoch's order in every epoch.
    # The dataset too, when it rewrites molecules as random SMILES each epoch.
    for part in (loader.batch_sampler, loader.sampler, loader.dataset):
        if hasattr(part, "set_epoch"):
            part.set_epoch(epoch)


@dataclass
class StepOptions:
    """How one optimisation step runs on this rank.

    per_rank_batch: the global batch / world size; losses are divided by it.
    accumulate: micro-batches per step (each rank's slice is cut in this many
        pieces; only the last one all-reduces gradients), for when a batch
        does not fit in memory. The global batch keeps its meaning.
    amp: "off", "bf16" (CPU or CUDA) or "fp16" (CUDA, with loss scaling).
    """
    per_rank_batch: int
    accumulate: int = 1
    amp: str = "off"
    scaler: object = field(init=False)

    def __post_init__(self):
        self.scaler = torch.amp.GradScaler(enabled=self.amp == "fp16")

    def autocast(self, device):
        dtype = torch.float16 if self.amp == "fp16" else torch.bfloat16
        return torch.autocast(device.type, dtype=dtype, enabled=self.amp != "off")


def _micro_batches(batch, pieces):
    tokens, lengths, labels = batch
    for t, n, y in zip(*(torch.tensor_split(x, pieces) for x in (tokens, lengths, labels))):
        if len(n):
            yield t[:, : int(n.max())], n, y


def train_step(model, optimizer, batch, device, options):
    """One optimisation step; returns the batch's summed loss, still on the device.

    Each rank divides its summed loss by the per-rank batch; DDP then averages
    gradients over ranks, so the step equals one process taking the global
    batch (a smaller last batch is weighted by its size).
    """
    optimizer.zero_grad(set_to_none=True)
    pieces = list(_micro_batches(batch, options.accumulate))
    total = torch.zeros((), device=device)
    for i, (tokens, lengths, labels) in enumerate(pieces):
        # Only the last micro-batch all-reduces: the others just add to .grad.
        last = i == len(pieces) - 1
        with nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync():
            with options.autocast(device):
                logits = model(tokens.to(device, non_blocking=True), lengths)
            labels = labels.to(device, non_blocking=True)
            loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels, reduction="sum")
            options.scaler.scale(loss / options.per_rank_batch).backward()
        total += loss.detach()
    options.scaler.step(optimizer)
    options.scaler.update()
    return total


def train_one_epoch(model, optimizer, loader, device, options, progress=False, description="train"):
    """One pass over this rank's shard; returns (mean loss, samples) over all ranks."""
    model.train()
    loss_sum = torch.zeros((), device=device)
    samples = torch.zeros((), device=device)
    # Counts molecules of all ranks (this rank's times the world size), so
    # the rate it shows is the job's, not one rank's.
    bar = tqdm(total=len(loader.dataset), disable=not progress, leave=False, desc=description, unit="mol")
    for batch in loader:
        # Accumulated on the device and read once per epoch: no host sync per step.
        loss_sum += train_step(model, optimizer, batch, device, options)
        samples += len(batch[2])
        bar.update(len(batch[2]) * get_world_size())
    bar.close()
    totals = all_reduce_sum(torch.stack([loss_sum, samples]))
    return (totals[0] / totals[1]).item(), int(totals[1].item())


TTA_EPOCH_OFFSET = 10 ** 6  # random-SMILES streams for test-time augmentation, apart from training epochs


def _mean_logits(model, loader, device, tta):
    """(labels, logits) in loader order; with `tta`, the mean logit over the
    canonical SMILES and `tta` random ones (the order does not change: the
    sampler sorts by canonical length)."""
    labels, _, logits = predict(model, loader, device)
    for variant in range(1, tta + 1):
        loader.dataset.set_epoch(TTA_EPOCH_OFFSET + variant)
        logits = logits + predict(model, loader, device)[2]
    if tta:
        loader.dataset.set_epoch(None)
    return labels, logits / (tta + 1)


def evaluate_split(model, loader, device, split, sharded=False, tta=0):
    """Loss and ROC AUC of one split, the same `Evaluation` on every rank.

    By default rank 0 scores the whole split on the unwrapped module (a DDP
    forward would start a collective the other ranks never join) while the
    others wait in the broadcast. With `sharded`, each rank scores its own
    share (no molecule twice) and the predictions are gathered first.
    """
    if sharded:
        labels, logits = _mean_logits(unwrap(model), loader, device, tta)
        parts = all_gather_object((labels, logits.numpy()))
        return score(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), split)
    outcome = None
    if is_master_process():
        try:
            outcome = score(*_mean_logits(unwrap(model), loader, device, tta), split)
        except EvaluationError as exc:
            outcome = str(exc)
    outcome = broadcast_object(outcome)
    if isinstance(outcome, str):
        raise EvaluationError(outcome)
    return outcome


def save_snapshot(path, *, model, optimizer, result, extra):
    """End-of-epoch snapshot: rank 0 writes it atomically, the others wait.

    Every rank calls this: the random states of all ranks are gathered
    (their dropout streams differ), and the barrier keeps any rank from
    running ahead before the snapshot is complete on disk.
    """
    rng_states = all_gather_object(capture_rng())
    if is_master_process():
        state = dict(model=unwrap(model).state_dict(), optimizer=optimizer.state_dict(),
                     epoch=result.epochs_completed, best_epoch=result.best_epoch,
                     best_dev_roc_auc=result.best_dev_roc_auc, best_state=result.best_state,
                     history=result.history, rng=rng_states, **extra)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(state, path)
    barrier()


def restore_snapshot(state, *, model, optimizer):
    """Load a snapshot into model and optimizer; return the TrainResult so far."""
    try:
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"the snapshot does not fit this model and these flags ({str(exc)[:200]})") from None
    rng = state["rng"]
    restore_rng(rng[get_rank()] if get_rank() < len(rng) else rng[0])
    log.info("resumed from the snapshot after epoch %d (best dev ROC AUC %.4f at epoch %d)",
             state["epoch"], state["best_dev_roc_auc"], state["best_epoch"])
    return TrainResult(best_state=state["best_state"], best_epoch=state["best_epoch"],
                       best_dev_roc_auc=state["best_dev_roc_auc"], epochs_completed=state["epoch"],
                       train_samples_per_second=0.0, history=list(state["history"]))


def train(*, model, optimizer, train_loader, dev_loader, epochs, device, global_batch_size,
          patience=None, writer=None, progress=False, sharded_eval=False, tta=0, accumulate=1, amp="off",
          snapshot_path=None, snapshot_extra=None, resume_from=None, test_loader=None):
    """Train, score dev each epoch, keep the best weights (a state-dict copy).

    With `test_loader`, the test set is scored each epoch too, for the curves
    only: the best epoch is chosen on dev alone.

    With `snapshot_path`, a snapshot is saved after every epoch; `resume_from`
    (a loaded snapshot) continues at the epoch after it.
    """
    if resume_from is not None:
        best = restore_snapshot(resume_from, model=model, optimizer=optimizer)
    else:
        best = TrainResult(best_state={}, best_epoch=0, best_dev_roc_auc=-1.0, epochs_completed=0,
                           train_samples_per_second=0.0)
    if amp == "fp16" and device.type != "cuda":
        raise PartorchError("--amp fp16 needs a CUDA GPU; on CPU use --amp bf16")
    options = StepOptions(global_batch_size // get_world_size(), accumulate, amp)
    log.info("training: up to %d epochs, global batch %d = %d processes x %d (in %d micro-batches), "
             "%d steps per epoch, precision %s", epochs, global_batch_size, get_world_size(),
             options.per_rank_batch, accumulate, len(train_loader), amp)
    train_seconds, train_samples = 0.0, 0
    for epoch in range(best.epochs_completed + 1, epochs + 1):
        if patience and epoch - 1 - best.best_epoch >= patience:
            break
        set_epoch(train_loader, epoch)
        start = time.perf_counter()
        train_loss, samples = train_one_epoch(model, optimizer, train_loader, device, options, progress,
                                              description=f"epoch {epoch}/{epochs}")
        seconds = time.perf_counter() - start
        train_seconds, train_samples = train_seconds + seconds, train_samples + samples
        dev = evaluate_split(model, dev_loader, device, "dev split", sharded_eval, tta)
        row = dict(epoch=epoch, train_loss=train_loss, dev_loss=dev.loss, dev_roc_auc=dev.roc_auc,
                   samples_per_second=samples / seconds, lr=optimizer.param_groups[0]["lr"])
        if test_loader is not None:
            test = evaluate_split(model, test_loader, device, "test split", sharded_eval, tta)
            row.update(test_loss=test.loss, test_roc_auc=test.roc_auc)
        best.history.append(row)
        best.epochs_completed = epoch
        if dev.roc_auc > best.best_dev_roc_auc:
            best.best_dev_roc_auc, best.best_epoch = dev.roc_auc, epoch
            best.best_state = {k: v.detach().clone() for k, v in unwrap(model).state_dict().items()}
        _report_epoch(row, epochs, writer)
        if snapshot_path is not None:
            save_snapshot(snapshot_path, model=model, optimizer=optimizer, result=best, extra=snapshot_extra or {})
    if patience and best.epochs_completed - best.best_epoch >= patience:
        log.info("no better dev ROC AUC for %d epochs: stopped early after epoch %d", patience, best.epochs_completed)
    best.train_samples_per_second = train_samples / max(train_seconds, 1e-9)
    return best


def _report_epoch(row, epochs, writer):
    if not is_master_process():
        return
    log.info("epoch %d/%d  train loss %.4f  dev loss %.4f  dev ROC AUC %.4f  %.0f samples/s",
             row["epoch"], epochs, row["train_loss"], row["dev_loss"], row["dev_roc_auc"],
             row["samples_per_second"])
    if writer is not None:
        step = row["epoch"]
        writer.add_scalar("Loss/train", row["train_loss"], step)
        writer.add_scalar("Loss/dev", row["dev_loss"], step)
        writer.add_scalar("ROC_AUC/dev", row["dev_roc_auc"], step)
        if "test_loss" in row:
            writer.add_scalar("Loss/test", row["test_loss"], step)
            writer.add_scalar("ROC_AUC/test", row["test_roc_auc"], step)
        writer.add_scalar("Throughput/train_samples_per_second", row["samples_per_second"], step)
        writer.add_scalar("LR", row["lr"], step)
