"""Batch samplers that shard every global batch across ranks.

Both take the *global* batch size and give each rank its slice, so 1 and N
processes take the same optimisation steps, and every rank takes the same
number of steps (a rank with one batch more would wait forever in an
all-reduce its peers never start). `set_epoch` must be called every epoch,
with the same epoch on every rank; its `start` skips the batches a run
trained before it was stopped inside that epoch.
"""

from itertools import islice

import numpy as np
from torch.utils.data import BatchSampler, DistributedSampler

from .errors import DataError


def check_divisible(batch_size, world_size):
    if batch_size % world_size:
        raise DataError(f"batch size {batch_size} is not divisible by world size {world_size}")


class LengthBucketBatchSampler:
    """Global batches of items of one length where possible, else of similar
    length, each split across ranks.

    Every rank draws the same global batches (same seed and epoch) and keeps
    its own slice, so together the ranks see each item exactly once per
    epoch, with no padding duplicates. A length shared by at least a batch of
    items gives full batches of that length alone (no padding: the model runs
    them as one fused call); the items left over are sorted by length and
    cut into batches (little padding). Which items share a batch is drawn
    from (seed, epoch), as is the order of the batches.
    Without `lengths` (fixed-size inputs) it is a plain shuffled sampler.
    """

    def __init__(self, lengths, batch_size, *, world_size=1, rank=0, shuffle=False, seed=0):
        check_divisible(batch_size, world_size)
        if shuffle and len(lengths) < world_size:
            raise DataError(
                f"{len(lengths)} training molecules are too few for {world_size} processes"
            )
        self.lengths = np.asarray(lengths)
        self.batch_size, self.world_size, self.rank = batch_size, world_size, rank
        self.shuffle, self.seed = shuffle, seed
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch, start=0):
        self.epoch, self.start = epoch, start

    def global_batches(self):
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        order = order[
            np.argsort(self.lengths[order], kind="stable")
        ]  # by length; random within a length
        groups = np.split(order, np.flatnonzero(np.diff(self.lengths[order])) + 1)
        size = self.batch_size
        batches = [g[i : i + size] for g in groups for i in range(0, len(g) - size + 1, size)]
        leftovers = np.concatenate([g[len(g) - len(g) % size :] for g in groups])
        batches += [leftovers[i : i + size] for i in range(0, len(leftovers), size)]
        # A last batch smaller than the world would leave some rank with
        # nothing to do, and that rank would skip the gradient all-reduce:
        # merge it into the one before. The threshold does not depend on the
        # world size (while batch/2 >= world size), so 1 and N processes
        # still take identical steps.
        if len(batches) > 1 and len(batches[-1]) < max(self.batch_size // 2, self.world_size):
            batches[-2:] = [np.concatenate(batches[-2:])]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self):
        for batch in self.global_batches()[self.start :]:
            mine = batch[self.rank :: self.world_size].tolist()
            if mine:
                yield mine

    def __len__(self):
        return sum(1 for _ in self)


class DistributedRandomBatchSampler(BatchSampler):
    """torch's DistributedSampler, batched: random items, and each rank's
    share padded with repeated items so that all ranks get the same count
    (for training only: evaluation must not count an item twice)."""

    def __init__(self, size, batch_size, *, world_size=1, rank=0, shuffle=False, seed=0):
        check_divisible(batch_size, world_size)
        self.shards = DistributedSampler(
            range(size), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed
        )
        super().__init__(self.shards, batch_size // world_size, drop_last=False)
        self.start = 0

    def set_epoch(self, epoch, start=0):
        self.shards.set_epoch(epoch)
        self.start = start

    def __iter__(self):
        return islice(super().__iter__(), self.start, None)

    def __len__(self):
        return super().__len__() - self.start
