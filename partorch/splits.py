"""Train / dev / test indices. The same inputs give the same split on every
rank, so no rank has to send its split to another."""
from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split

from .chem import scaffold_groups
from .molecule_csv import DataError

TEST_FRACTION = 0.1  # of all molecules, held out
DEV_FRACTION = 0.2  # of the rest
SPLITS = ("stratified", "scaffold", "random")


@dataclass
class Splits:
    train: np.ndarray
    dev: np.ndarray
    test: np.ndarray

    def as_lists(self):
        return {name: getattr(self, name).tolist() for name in ("train", "dev", "test")}


def split_indices(count, seed, method="stratified", *, classes=None, smiles=None,
                  test_fraction=TEST_FRACTION, dev_fraction=DEV_FRACTION):
    """Indices of `count` molecules in three sorted, disjoint arrays.

    stratified: random within each class of `classes` (one 0/1 label per
        molecule: the tutorial's split, the default). Without `classes`
        (regression, several tasks) it is the random split.
    random: random, ignoring the labels.
    scaffold: Bemis-Murcko groups of `smiles` (RDKit); whole groups go to
        train, largest first, then dev, then test, so test molecules have
        scaffolds never seen in training. It ignores the seed (MoleculeNet's
        convention).
    """
    if classes is not None:
        counts = np.bincount(np.asarray(classes), minlength=2)
        if counts.min() == 0:
            raise DataError(f"all {len(classes)} molecules have label {int(np.argmax(counts))}: "
                            "ROC AUC needs both classes")
    if method == "scaffold":
        if smiles is None:
            raise DataError("the scaffold split needs the SMILES")
        splits = _scaffold_split(smiles, test_fraction, dev_fraction)
    elif method in ("stratified", "random"):
        stratify = np.asarray(classes) if method == "stratified" and classes is not None else None
        splits = _random_split(count, seed, test_fraction, dev_fraction, stratify)
    else:
        raise DataError(f"unknown split {method!r}: choose one of {', '.join(SPLITS)}")
    if classes is not None:
        _require_both_classes(np.asarray(classes), splits, method)
    return splits


def _require_both_classes(classes, splits, method):
    for name in ("train", "dev", "test"):
        part = getattr(splits, name)
        if len(np.unique(classes[part])) < 2:
            raise DataError(f"the {method} split leaves the {name} set ({len(part)} molecules) with one class only")


def _random_split(count, seed, test_fraction, dev_fraction, stratify):
    if stratify is not None and np.bincount(stratify, minlength=2).min() < 5:
        rare = int(np.argmin(np.bincount(stratify, minlength=2)))
        raise DataError(f"only {int((stratify == rare).sum())} molecules of class {rare}: "
                        "too few to stratify into train, dev and test (need at least 5)")
    everything = np.arange(count)
    try:
        visible, test = train_test_split(everything, test_size=test_fraction, shuffle=True, random_state=seed,
                                         stratify=stratify)
        train, dev = train_test_split(visible, test_size=dev_fraction, shuffle=True, random_state=seed,
                                      stratify=None if stratify is None else stratify[visible])
    except ValueError as exc:
        raise DataError(f"cannot split {count} molecules: {exc}") from None
    return Splits(np.sort(train), np.sort(dev), np.sort(test))


def _scaffold_split(smiles, test_fraction, dev_fraction):
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
    return Splits(np.array(sorted(train), dtype=int), np.array(sorted(dev), dtype=int),
                  np.array(sorted(test), dtype=int))


def split_molecules(table, method, seed, task_kind):
    """`split_indices` for a MoleculeTable: stratified by class when there is
    one 0/1 column; errors name the file."""
    single_class_column = task_kind == "classification" and len(table.label_columns) == 1
    classes = table.labels[:, 0].astype(int) if single_class_column else None
    try:
        return split_indices(len(table.smiles), seed, method, classes=classes, smiles=table.smiles)
    except DataError as exc:
        raise DataError(f"{table.source}: {exc}") from None
