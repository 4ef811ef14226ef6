"""SMILES datasets: molecules tokenized once into tensors of ids, optionally
rewritten as random SMILES each epoch. Their batches are `Batch((token ids,
lengths), targets)`, or `Batch((token ids, lengths, features), targets)` with
computed features (--extra-features); the `lengths` let the bucket sampler group
molecules of similar length."""

import numpy as np
import torch
from torch.utils.data import Dataset

from ..ddp.data import Batch, as_targets
from ..ddp.errors import DataError
from .chem import random_smiles


def collate_token_ids(items):
    """Batch((token ids [B, T] padded with 0, lengths [B][, features [B, k]]), targets [B, tasks])
    from items (token ids[, features], targets)."""
    ids, *features, targets = zip(*items)
    lengths = torch.tensor([len(t) for t in ids])
    tokens = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for row, t in enumerate(ids):
        tokens[row, : len(t)] = t
    return Batch((tokens, lengths, *map(torch.stack, features)), torch.stack(targets))


class SmilesDataset(Dataset):
    """Molecules tokenized once, up front, into tensors of ids; with `features` (an array
    [molecules, k]), each item carries its molecule's row too."""

    collate = staticmethod(collate_token_ids)

    def __init__(self, smiles_list, labels, tokenizer, features=None):
        self.tokenizer = tokenizer
        self.features = None if features is None else _feature_rows(features)
        self.feature_count = 0 if features is None else self.features.shape[1]
        self.token_ids = [torch.tensor(tokenizer.encode(s), dtype=torch.long) for s in smiles_list]
        self.targets = as_targets(labels)
        self.lengths = np.array([len(t) for t in self.token_ids])
        if (self.lengths == 0).any():
            raise DataError(f"molecule {int(np.argmin(self.lengths))} encodes to no tokens")

    def __len__(self):
        return len(self.token_ids)

    def __getitem__(self, i):
        return self._item(i, self.token_ids[i])

    def _item(self, i, token_ids):
        if self.features is None:
            return token_ids, self.targets[i]
        return token_ids, self.features[i].float(), self.targets[i]


class AugmentedSmilesDataset(SmilesDataset):
    """A SmilesDataset that can rewrite its molecules as random SMILES.

    After `set_epoch(e)`, item i is a random SMILES of molecule i drawn from
    (seed, e, key i), written when the item is fetched: each rank pays only
    for the molecules of its shard, and a molecule's string does not depend
    on the rank or the world size that reads it. `keys` name the molecules
    (their rows in the whole table, so dev and test streams never meet
    train's). `set_epoch(None)` restores the given strings. `lengths` stays
    the given strings' lengths on purpose: the batch sampler must see the
    same lengths on every rank to build the same global batches.
    """

    def __init__(self, smiles_list, labels, tokenizer, seed=0, keys=None, features=None):
        super().__init__(smiles_list, labels, tokenizer, features)
        self.smiles, self.seed, self.epoch = list(smiles_list), seed, None
        self.keys = (
            np.arange(len(self.smiles)) if keys is None else np.asarray(keys, dtype=np.int64)
        )

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __getitem__(self, i):
        if self.epoch is None:
            return super().__getitem__(i)
        rng = np.random.default_rng([self.seed, self.epoch, int(self.keys[i])])
        rewritten = random_smiles([self.smiles[i]], rng)[0]
        return self._item(i, torch.tensor(self.tokenizer.encode(rewritten), dtype=torch.long))


def smiles_dataset(
    smiles_list, labels, tokenizer, indices=None, augment=False, seed=0, features=None
):
    """The tutorial's way in: lists of SMILES and labels (and optionally an array of features,
    a row per molecule), optionally a subset by `indices`."""
    keys = indices
    if indices is not None:
        rows = np.asarray(indices, dtype=int)
        smiles_list = [smiles_list[i] for i in indices]
        labels = np.asarray(labels)[rows]
        features = None if features is None else np.asarray(features)[rows]
    if augment:
        return AugmentedSmilesDataset(
            smiles_list, labels, tokenizer, seed=seed, keys=keys, features=features
        )
    return SmilesDataset(smiles_list, labels, tokenizer, features)


def _feature_rows(features):
    """The features as a tensor, kept in float16 when they come so (Morgan counts: half the
    memory); an item's row is read as float32."""
    rows = torch.as_tensor(np.asarray(features))
    return rows if rows.dtype == torch.float16 else rows.float()
