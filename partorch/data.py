"""From a CSV file to batches: reading, validation, splits, datasets, loaders.

Everything here is deterministic given the file and the seed, so every rank
computes the same records, the same split and the same batch order without
talking to the others.
"""
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .chem import random_smiles, scaffold_groups
from .errors import PartorchError

TEST_FRACTION = 0.1  # of all molecules, held out
DEV_FRACTION = 0.2  # of the rest


class DataError(PartorchError):
    pass


@dataclass
class MoleculeTable:
    smiles: list
    labels: np.ndarray  # int64 0/1
    rows: np.ndarray  # line number of each molecule in the file (header = 1)
    warnings: list


@dataclass
class Splits:
    train: np.ndarray
    dev: np.ndarray
    test: np.ndarray


def _first_rows(rows, limit=5):
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" (and {len(rows) - limit} more)" if len(rows) > limit else "")


def _looks_binary(path):
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False  # let pandas report why it cannot be read
    return b"\0" in head


def _read_frame(path):
    if _looks_binary(path):
        raise DataError(f"{path}: binary data, not a CSV text file")
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a CSV file") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty") from None
    except (UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise DataError(f"{path}: not a readable CSV file ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def _parse_labels(path, label_column, values, rows):
    parsed = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy()
    bad = ~np.isin(parsed, (0.0, 1.0))
    if bad.any():
        examples = [f"row {r}: {values[i]!r}" for r, i in zip(rows[bad][:5], np.flatnonzero(bad)[:5])]
        raise DataError(f"{path}: column {label_column!r} must hold 0 or 1; "
                        f"{int(bad.sum())} rows do not, first: {'; '.join(examples)}")
    return parsed.astype(np.int64)


def read_smiles_csv(path, smiles_column="smiles", label_column="p_np", strict=False):
    """Read and validate a CSV file into SMILES strings and 0/1 labels."""
    frame = _read_frame(path)
    for column in (smiles_column, label_column):
        if column not in frame.columns:
            raise DataError(f"{path}: no column {column!r}; the columns are {list(frame.columns)}")
    rows = np.arange(len(frame)) + 2
    warnings = []
    missing = frame[label_column].isna().to_numpy()
    if missing.any():
        message = (f"{path}: {int(missing.sum())} rows have no {label_column!r} label, "
                   f"first rows {_first_rows(rows[missing])}")
        if strict:
            raise DataError(message)
        warnings.append(message + "; they are dropped")
        frame, rows = frame[~missing], rows[~missing]
    empty = frame[smiles_column].fillna("").str.strip().eq("").to_numpy()
    if empty.any():
        raise DataError(f"{path}: empty SMILES in column {smiles_column!r} at rows {_first_rows(rows[empty])}")
    if len(frame) == 0:
        raise DataError(f"{path}: no molecules (header only?)")
    smiles = frame[smiles_column].str.strip().tolist()
    labels = _parse_labels(path, label_column, frame[label_column].tolist(), rows)
    return MoleculeTable(smiles, labels, rows, warnings + _conflict_warnings(path, smiles, labels))


def _conflict_warnings(path, smiles, labels):
    by_smiles = pd.Series(labels).groupby(pd.Series(smiles)).nunique()
    conflicting = int((by_smiles > 1).sum())
    if conflicting:
        return [f"{path}: {conflicting} SMILES appear with both labels"]
    return []


def drop_rows(table, positions, reason):
    """The table without the molecules at `positions`, with a warning naming their rows."""
    if not positions:
        return table
    keep = np.setdiff1d(np.arange(len(table.smiles)), positions)
    warning = f"{len(positions)} rows {reason}, dropped: rows {_first_rows(table.rows[positions], 11)}"
    return MoleculeTable([table.smiles[i] for i in keep], table.labels[keep], table.rows[keep],
                         table.warnings + [warning])


SPLITS = ("stratified", "scaffold", "random")


def split_indices(labels, seed, method="stratified", smiles=None,
                  test_fraction=TEST_FRACTION, dev_fraction=DEV_FRACTION):
    """Train/dev/test indices; the same inputs give the same split on every rank.

    stratified: random within each class (the tutorial's split; the default).
    random: random, ignoring the labels.
    scaffold: molecules grouped by Bemis-Murcko scaffold (needs RDKit and
        `smiles`); whole groups go to train, largest first, then dev, then
        test, so test molecules have scaffolds never seen in training. It
        does not depend on the seed (the MoleculeNet convention).
    """
    labels = np.asarray(labels)
    counts = np.bincount(labels, minlength=2)
    if counts.min() == 0:
        raise DataError(f"all {len(labels)} molecules have label {int(np.argmax(counts))}: ROC AUC needs both classes")
    if method == "scaffold":
        splits = _scaffold_split(smiles, test_fraction, dev_fraction)
    elif method in ("stratified", "random"):
        splits = _random_split(labels, seed, test_fraction, dev_fraction, stratify=method == "stratified")
    else:
        raise DataError(f"unknown split {method!r}: choose one of {', '.join(SPLITS)}")
    for name in ("train", "dev", "test"):
        part = getattr(splits, name)
        if len(np.unique(labels[part])) < 2:
            raise DataError(f"the {method} split leaves the {name} set ({len(part)} molecules) with one class only")
    return splits


def _random_split(labels, seed, test_fraction, dev_fraction, stratify):
    counts = np.bincount(labels, minlength=2)
    if stratify and counts.min() < 5:
        raise DataError(f"only {counts.min()} molecules of class {int(np.argmin(counts))}: "
                        "too few to stratify into train, dev and test (need at least 5)")
    everything = np.arange(len(labels))
    try:
        visible, test = train_test_split(everything, test_size=test_fraction, shuffle=True, random_state=seed,
                                         stratify=labels if stratify else None)
        train, dev = train_test_split(visible, test_size=dev_fraction, shuffle=True, random_state=seed,
                                      stratify=labels[visible] if stratify else None)
    except ValueError as exc:
        raise DataError(f"cannot split {len(labels)} molecules: {exc}") from None
    return Splits(np.sort(train), np.sort(dev), np.sort(test))


def _scaffold_split(smiles, test_fraction, dev_fraction):
    if smiles is None:
        raise DataError("the scaffold split needs the SMILES")
    n = len(smiles)
    train_cut = (1 - test_fraction) * (1 - dev_fraction) * n
    dev_cut = (1 - test_fraction) * n
    train, dev, test = [], [], []
    for group in scaffold_groups(smiles):
        if len(train) + len(group) <= train_cut:
            train += group
        elif len(train) + len(dev) + len(group) <= dev_cut:
            dev += group
        else:
            test += group
    return Splits(np.sort(train), np.sort(dev), np.sort(test))


class SmilesDataset(Dataset):
    """Molecules tokenized once, up front, into tensors of ids."""

    def __init__(self, smiles_list, labels, tokenizer):
        self.token_ids = [torch.tensor(tokenizer.encode(s), dtype=torch.long) for s in smiles_list]
        self.labels = torch.as_tensor(np.asarray(labels), dtype=torch.float32)
        self.lengths = np.array([len(t) for t in self.token_ids])
        if (self.lengths == 0).any():
            raise DataError(f"molecule {int(np.argmin(self.lengths))} encodes to no tokens")

    def __len__(self):
        return len(self.token_ids)

    def __getitem__(self, i):
        return self.token_ids[i], self.labels[i]


class AugmentedSmilesDataset(SmilesDataset):
    """A SmilesDataset that can rewrite its molecules as random SMILES.

    `set_epoch(e)` re-encodes every molecule as a fresh random SMILES drawn
    from (seed, e, rank): reproducible, and different on every rank.
    `set_epoch(None)` restores the canonical strings. `lengths` stays the
    canonical lengths on purpose: the batch sampler must see the same lengths
    on every rank to build the same global batches.
    """

    def __init__(self, smiles_list, labels, tokenizer, seed=0, rank=0):
        super().__init__(smiles_list, labels, tokenizer)
        self.smiles, self.tokenizer, self.seed, self.rank = list(smiles_list), tokenizer, seed, rank
        self.canonical_ids = self.token_ids

    def set_epoch(self, epoch):
        if epoch is None:
            self.token_ids = self.canonical_ids
            return
        rng = np.random.default_rng([self.seed, epoch, self.rank])
        self.token_ids = [torch.tensor(self.tokenizer.encode(s), dtype=torch.long)
                          for s in random_smiles(self.smiles, rng)]


def collate_batch(items):
    """(padded token ids [B, T], lengths [B], labels [B]); 0 pads."""
    ids, labels = zip(*items)
    lengths = torch.tensor([len(t) for t in ids])
    tokens = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for row, t in enumerate(ids):
        tokens[row, : len(t)] = t
    return tokens, lengths, torch.stack(labels)


class LengthBucketBatchSampler:
    """Global batches of molecules of similar length, each split across ranks.

    Every rank draws the same global batches (same seed and epoch) and keeps
    its own slice, so all ranks take the same number of steps and together see
    each molecule exactly once per epoch. Similar lengths mean little padding,
    and no packing, which keeps the fast fused LSTM kernels.
    """

    def __init__(self, lengths, batch_size, *, world_size=1, rank=0, shuffle=False, seed=0, pool_batches=32):
        if batch_size % world_size:
            raise DataError(f"batch size {batch_size} is not divisible by world size {world_size}")
        if shuffle and len(lengths) < world_size:
            raise DataError(f"{len(lengths)} training molecules are too few for {world_size} processes")
        self.lengths = np.asarray(lengths)
        self.batch_size, self.world_size, self.rank = batch_size, world_size, rank
        self.shuffle, self.seed, self.pool_batches = shuffle, seed, pool_batches
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def global_batches(self):
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        pool = self.batch_size * self.pool_batches
        batches = []
        for start in range(0, len(order), pool):
            chunk = order[start:start + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        # A last batch smaller than the world would leave some rank with
        # nothing to do, and that rank would skip the gradient all-reduce:
        # merge it into the one before. The threshold does not depend on the
        # world size (while batch/2 >= world size), so 1 and N processes
        # still take identical steps.
        if len(batches) > 1 and len(batches[-1]) < max(self.batch_size // 2, self.world_size):
            batches[-2:] = [np.concatenate(batches[-2:])]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self):
        for batch in self.global_batches():
            mine = batch[self.rank::self.world_size].tolist()
            if mine:
                yield mine

    def __len__(self):
        return sum(1 for _ in self)


def _loader(dataset, num_workers, **kwargs):
    return DataLoader(dataset, collate_fn=collate_batch, num_workers=num_workers,
                      persistent_workers=num_workers > 0, pin_memory=torch.cuda.is_available(), **kwargs)


def _subset(smiles_list, labels, indices):
    if indices is None:
        return smiles_list, labels
    return [smiles_list[i] for i in indices], np.asarray(labels)[np.asarray(indices)]


def get_dataloader(*, smiles_list, labels, tokenizer, batch_size, num_workers=0, indices=None,
                   shuffle=False, seed=0, sampler="bucket", augment=False):
    """Loader for one process; see `get_ddp_dataloader`."""
    return get_ddp_dataloader(rank=0, world_size=1, smiles_list=smiles_list, labels=labels,
                              tokenizer=tokenizer, batch_size=batch_size, num_workers=num_workers,
                              indices=indices, shuffle=shuffle, seed=seed, sampler=sampler, augment=augment)


def get_ddp_dataloader(*, rank, world_size, smiles_list, labels, tokenizer, batch_size, num_workers=0,
                       indices=None, shuffle=False, seed=0, sampler="bucket", augment=False):
    """Loader of this rank's share; `batch_size` is the *global* batch.

    sampler="bucket" batches molecules of similar length (fast, no duplicates);
    sampler="random" is torch's `DistributedSampler`, which pads the split
    with repeated molecules so that every rank gets the same count.
    augment=True makes the dataset an `AugmentedSmilesDataset` (random SMILES
    on `set_epoch`); it needs num_workers=0, since worker processes would
    keep their own copy of the dataset.
    """
    if augment and num_workers:
        raise DataError("SMILES augmentation works with --num-workers 0 only")
    dataset = (AugmentedSmilesDataset(*_subset(smiles_list, labels, indices), tokenizer, seed=seed, rank=rank)
               if augment else SmilesDataset(*_subset(smiles_list, labels, indices), tokenizer))
    if sampler == "bucket":
        batches = LengthBucketBatchSampler(dataset.lengths, batch_size, world_size=world_size, rank=rank,
                                           shuffle=shuffle, seed=seed)
        return _loader(dataset, num_workers, batch_sampler=batches)
    if sampler == "random":
        if batch_size % world_size:
            raise DataError(f"batch size {batch_size} is not divisible by world size {world_size}")
        shards = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed)
        return _loader(dataset, num_workers, sampler=shards, batch_size=batch_size // world_size)
    raise DataError(f"unknown sampler {sampler!r}: choose 'bucket' or 'random'")
