"""Train / dev / test indices. The same inputs give the same split on every
rank, so no rank has to send its split to another."""

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..ddp.errors import DataError
from .cached import cached_strings
from .chem import scaffold_smiles
from .chunked import joined

DEFAULT_SIZES = (0.72, 0.18, 0.10)  # the tutorial's: 10 % test, then 20 % of the rest dev
SPLITS = ("stratified", "random", "scaffold", "scaffold_balanced")


@dataclass
class Splits:
    train: np.ndarray
    dev: np.ndarray
    test: np.ndarray

    def as_lists(self):
        return {name: getattr(self, name).tolist() for name in ("train", "dev", "test")}


def parse_sizes(text):
    """'0.8,0.1,0.1' -> (0.8, 0.1, 0.1): three positive fractions summing to 1."""
    try:
        sizes = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"expected three fractions such as 0.8,0.1,0.1, got {text!r}") from None
    if len(sizes) != 3 or not all(0 < s < 1 for s in sizes) or abs(sum(sizes) - 1) > 1e-6:
        raise ValueError(
            f"expected three fractions > 0 that sum to 1 (train,dev,test), got {text!r}"
        )
    return sizes


def split_indices(
    count,
    seed,
    method="stratified",
    *,
    classes=None,
    smiles=None,
    sizes=DEFAULT_SIZES,
    cache=False,
):
    """Indices of `count` molecules in three sorted, disjoint arrays, of about
    `sizes` (train, dev, test fractions) of them.

    stratified: random within each class of `classes` (one 0/1 label per
        molecule: the tutorial's split, the default). Without `classes`
        (regression, several tasks) it is the random split.
    random: random, ignoring the labels.
    scaffold: Bemis-Murcko groups of `smiles` (RDKit); whole groups go to
        train, largest first, then dev, then test, so test molecules have
        scaffolds never seen in training. It ignores the seed (DeepChem's
        splitter, the one MoleculeNet's scaffold figures use).
    scaffold_balanced: scaffold groups too, in chemprop's order: groups too
        big for half of dev or test first (shuffled), so they land in train,
        then the small ones, shuffled by the seed; filled by the same rule as
        scaffold (chemprop's own fills dev without counting train, and draws
        with Python's random: the idea, not its exact splits).

    With `cache`, the scaffolds come from the cache after the first run (see cached_strings).
    """
    if classes is not None:
        counts = np.bincount(np.asarray(classes), minlength=2)
        if counts.min() == 0:
            raise DataError(
                f"all {len(classes)} molecules have label {int(np.argmax(counts))}: "
                "ROC AUC needs both classes"
            )
    if method in ("scaffold", "scaffold_balanced"):
        if smiles is None:
            raise DataError("the scaffold split needs the SMILES")
        groups = scaffold_groups(smiles, cache)
        if method == "scaffold_balanced":
            groups = _balanced_order(groups, count, sizes, seed)
        splits = _fill_in_order(groups, count, sizes)
    elif method in ("stratified", "random"):
        stratify = np.asarray(classes) if method == "stratified" and classes is not None else None
        splits = _random_split(count, seed, sizes, stratify)
    else:
        raise DataError(f"unknown split {method!r}: choose one of {', '.join(SPLITS)}")
    if classes is not None:
        _require_both_classes(np.asarray(classes), splits, method)
    return splits


def _require_both_classes(classes, splits, method):
    for name in ("train", "dev", "test"):
        part = getattr(splits, name)
        if len(np.unique(classes[part])) < 2:
            raise DataError(
                f"the {method} split leaves the {name} set ({len(part)} molecules) "
                "with one class only"
            )


def _random_split(count, seed, sizes, stratify):
    if stratify is not None and np.bincount(stratify, minlength=2).min() < 5:
        rare = int(np.argmin(np.bincount(stratify, minlength=2)))
        raise DataError(
            f"only {int((stratify == rare).sum())} molecules of class {rare}: "
            "too few to stratify into train, dev and test (need at least 5)"
        )
    from sklearn.model_selection import train_test_split  # here: importing partorch stays quick

    everything = np.arange(count)
    # 0.18 / 0.9 is 0.2, not 0.19999...
    dev_share_of_rest = round(sizes[1] / (sizes[0] + sizes[1]), 12)
    try:
        visible, test = train_test_split(
            everything, test_size=sizes[2], shuffle=True, random_state=seed, stratify=stratify
        )
        train, dev = train_test_split(
            visible,
            test_size=dev_share_of_rest,
            shuffle=True,
            random_state=seed,
            stratify=None if stratify is None else stratify[visible],
        )
    except ValueError as exc:
        raise DataError(f"cannot split {count} molecules: {exc}") from None
    return Splits(np.sort(train), np.sort(dev), np.sort(test))


def scaffold_groups(smiles, cache=False):
    """Indices grouped by Bemis-Murcko scaffold (without stereo), largest group first; among
    equal sizes the group whose first molecule comes later goes first. This is DeepChem's
    order, so that its scaffold split is reproduced."""
    groups = {}
    scaffolds = partial(joined, scaffold_smiles, description="scaffolds")
    for i, scaffold in enumerate(cached_strings("scaffolds", scaffolds, smiles, cache)):
        groups.setdefault(scaffold, []).append(i)
    return sorted(groups.values(), key=lambda group: (len(group), group[0]), reverse=True)


def _balanced_order(groups, count, sizes, seed):
    rng = np.random.default_rng(seed)
    big = [g for g in groups if len(g) > min(sizes[1], sizes[2]) * count / 2]
    small = [g for g in groups if len(g) <= min(sizes[1], sizes[2]) * count / 2]
    return [big[i] for i in rng.permutation(len(big))] + [
        small[i] for i in rng.permutation(len(small))
    ]


def _fill_in_order(groups, count, sizes):
    """Whole groups, in the given order: to train while it stays within its
    share, else to dev while train and dev stay within theirs, else to test."""
    train_cut, dev_cut = sizes[0] * count, (sizes[0] + sizes[1]) * count
    train, dev, test = [], [], []
    for group in groups:
        if len(train) + len(group) <= train_cut:
            train += group
        elif len(train) + len(dev) + len(group) <= dev_cut:
            dev += group
        else:
            test += group
    return Splits(*(np.array(sorted(part), dtype=int) for part in (train, dev, test)))


def split_molecules(table, method, seed, task_kind, sizes=DEFAULT_SIZES, cache=False):
    """`split_indices` for a MoleculeTable: stratified by class when there is
    one column of classes (0/1, or a multi-class task's); errors name the file."""
    classes = None
    if task_kind == "classification" and len(table.label_columns) == 1:
        classes = table.labels[:, 0].astype(int)
    elif task_kind == "multiclass":  # numbered 0..K-1 whatever their values (3/5/7, -1/0/1)
        classes = np.unique(table.labels[:, 0], return_inverse=True)[1].reshape(-1)
    try:
        return split_indices(
            len(table.smiles),
            seed,
            method,
            classes=classes,
            smiles=table.smiles,
            sizes=sizes,
            cache=cache,
        )
    except DataError as exc:
        raise DataError(f"{table.source}: {exc}") from None


def repeats_across_parts(smiles, splits):
    """How many dev and test molecules have the SMILES of a molecule in an earlier part (train,
    or train then dev). In canonical form a repeat is the same molecule: a model can score it from
    memory, so a split with many flatters every model, the one that memorises most the most."""

    def repeats(part, earlier):
        known = {smiles[i] for i in getattr(splits, earlier)}
        return sum(smiles[i] in known for i in getattr(splits, part))

    return {
        "dev": len(splits.dev),
        "test": len(splits.test),
        "dev_in_train": repeats("dev", "train"),
        "test_in_train": repeats("test", "train"),
        "test_in_dev": repeats("test", "dev"),
    }


def describe_split(table, splits, method, seed, sizes):
    """splits.json, saved beside a model: which rows of the file (as an editor
    numbers them, the header is row 1) went where, and how they were chosen."""
    return {
        "split": method,
        "seed": seed,
        "sizes": list(sizes),
        "rows_of": table.source,
        **{name: table.rows[getattr(splits, name)].tolist() for name in ("train", "dev", "test")},
    }
