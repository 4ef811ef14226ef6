"""DataLoaders: one process (`get_dataloader`) or this rank's share of every
global batch (`get_ddp_dataloader`), over SMILES lists or a ready dataset."""
import numpy as np
import torch
from torch.utils.data import DataLoader

from .datasets import collate_tensors, smiles_dataset
from .molecule_csv import DataError
from .sampler import DistributedRandomBatchSampler, LengthBucketBatchSampler

SAMPLERS = ("bucket", "random")


def get_dataloader(*, batch_size, dataset=None, shuffle=False, seed=0, num_workers=0, sampler="bucket", **smiles):
    """A loader for one process; the arguments are those of `get_ddp_dataloader`."""
    return get_ddp_dataloader(rank=0, world_size=1, batch_size=batch_size, dataset=dataset, shuffle=shuffle,
                              seed=seed, num_workers=num_workers, sampler=sampler, **smiles)


def get_ddp_dataloader(*, rank, world_size, batch_size, dataset=None, shuffle=False, seed=0, num_workers=0,
                       sampler="bucket", **smiles):
    """This rank's loader; `batch_size` is the *global* batch.

    The data is either `dataset` (items for its `collate`, or tuples of
    tensors ending with the target; a `lengths` attribute lets the bucket
    sampler group similar lengths) or the tutorial's keywords `smiles_list`,
    `labels`, `tokenizer`, and optionally `indices` and `augment` (a fresh
    random SMILES per epoch, molecule and seed; needs RDKit).

    sampler="bucket" shards global batches of similar length (no item
    twice); "random" is torch's DistributedSampler, which pads each rank's
    share with repeated items (training only).
    """
    if dataset is None:
        dataset = smiles_dataset(**smiles, seed=seed)
    elif smiles:
        raise TypeError(f"give either dataset or SMILES keywords, not both ({', '.join(smiles)})")
    if sampler == "bucket":
        lengths = getattr(dataset, "lengths", np.ones(len(dataset), dtype=int))
        batches = LengthBucketBatchSampler(lengths, batch_size, world_size=world_size, rank=rank,
                                           shuffle=shuffle, seed=seed)
    elif sampler == "random":
        batches = DistributedRandomBatchSampler(len(dataset), batch_size, world_size=world_size, rank=rank,
                                                shuffle=shuffle, seed=seed)
    else:
        raise DataError(f"unknown sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    # Its own generator: every pass over a loader draws a seed for its workers, and drawn from torch's
    # global stream it would shift the dropout masks whenever dev or test is scored (--test-every-epoch
    # would change the trained model). Workers kept between passes hold a copy of the dataset made
    # once, so a dataset that set_epoch changes (random SMILES) gets fresh workers every pass.
    keep_workers = num_workers > 0 and not hasattr(dataset, "set_epoch")
    return DataLoader(dataset, batch_sampler=batches, collate_fn=getattr(dataset, "collate", collate_tensors),
                      num_workers=num_workers, persistent_workers=keep_workers,
                      pin_memory=torch.cuda.is_available(), generator=torch.Generator().manual_seed(seed))
