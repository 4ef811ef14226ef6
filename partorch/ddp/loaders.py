"""DataLoaders: one process (`get_dataloader`) or this rank's share of every
global batch (`get_ddp_dataloader`), over any map-style dataset."""

import signal

import numpy as np
import torch
from torch.utils.data import DataLoader

from .data import collate_tensors
from .errors import DataError
from .sampler import DistributedRandomBatchSampler, LengthBucketBatchSampler

SAMPLERS = ("bucket", "random")


class _Epochs:
    """What `loader.sampler` is on partorch's loaders: `set_epoch(epoch)`, the idiom
    torch's DistributedSampler taught, reaches the batch sampler (a new order from
    (seed, epoch)) and a dataset that rewrites its items each epoch (random SMILES)."""

    def __init__(self, batches, dataset):
        self.batches, self.dataset = batches, dataset

    def set_epoch(self, epoch, start=0):
        """`start`: the batches of this epoch to skip, trained before the run was paused."""
        self.batches.set_epoch(epoch, start)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)


class _Loader(DataLoader):
    """A DataLoader whose `sampler` sets the epoch of its batch sampler and dataset
    (torch's own `sampler` attribute is unused when a batch sampler is given)."""

    sampler = property(lambda self: _Epochs(self.batch_sampler, self.dataset), lambda self, _: None)


def get_dataloader(dataset, *, batch_size, shuffle=False, seed=0, num_workers=0, sampler="bucket"):
    """A loader for one process; the arguments are those of `get_ddp_dataloader`."""
    return get_ddp_dataloader(
        dataset,
        rank=0,
        world_size=1,
        batch_size=batch_size,
        shuffle=shuffle,
        seed=seed,
        num_workers=num_workers,
        sampler=sampler,
    )


def get_ddp_dataloader(
    dataset, *, rank, world_size, batch_size, shuffle=False, seed=0, num_workers=0, sampler="bucket"
):
    """This rank's loader; `batch_size` is the *global* batch.

    `dataset` holds items for its `collate` function, or tuples of tensors
    ending with the target; a `lengths` attribute lets the bucket sampler
    group items of similar length (SMILES datasets have one).

    sampler="bucket" shards global batches of similar length (no item
    twice); "random" is torch's DistributedSampler, which pads each rank's
    share with repeated items (training only). Either way the loader's
    `sampler` has `set_epoch`, which a training loop calls every epoch.
    """
    if sampler == "bucket":
        lengths = getattr(dataset, "lengths", np.ones(len(dataset), dtype=int))
        batches = LengthBucketBatchSampler(
            lengths, batch_size, world_size=world_size, rank=rank, shuffle=shuffle, seed=seed
        )
    elif sampler == "random":
        batches = DistributedRandomBatchSampler(
            len(dataset), batch_size, world_size=world_size, rank=rank, shuffle=shuffle, seed=seed
        )
    else:
        raise DataError(f"unknown sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    # Its own generator: every pass over a loader draws a seed for its workers, and drawn from
    # torch's global stream it would shift the dropout masks whenever dev or test is scored
    # (--test-every-epoch would change the trained model). Workers kept between passes hold a copy
    # of the dataset made once, so a dataset that set_epoch changes (random SMILES) gets fresh
    # workers every pass.
    keep_workers = num_workers > 0 and not hasattr(dataset, "set_epoch")
    return _Loader(
        dataset,
        batch_sampler=batches,
        collate_fn=getattr(dataset, "collate", collate_tensors),
        num_workers=num_workers,
        persistent_workers=keep_workers,
        pin_memory=torch.cuda.is_available(),
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=_ignore_sigterm,
    )


def _ignore_sigterm(worker_id):
    """A preempted job's SIGTERM reaches the loader's workers too (torchrun signals each
    worker's process group, SLURM the whole job). A worker it ended would make its rank fail
    with "DataLoader worker killed" before the rank could write its snapshot; the rank ends
    its workers itself once done (see ddp.preemption)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
