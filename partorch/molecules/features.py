"""Computed molecular features the network reads beside its SMILES encoding (--extra-features),
as chemprop's feature generators add them to its graph encoding.

    rdkit2d  RDKit 2D descriptors (chem.DESCRIPTORS), standardised with the training split's
             mean and deviation; a descriptor RDKit cannot compute becomes that mean (0)
    morgan   Morgan counts (radius 2, 2048 bits) as log(1 + count): most bits are rare, and
             standardising one seen twice in training would turn a test molecule's into a
             large number

The fitted features (kind, columns, statistics) are saved beside the model as
extra_features.json, so that scripts/predict.py computes what the model was trained on.
"""

from dataclasses import asdict, dataclass

import numpy as np

from ..ddp.errors import PartorchError
from .chem import DESCRIPTORS, molecular_descriptors, morgan_fingerprints

FEATURE_KINDS = ("none", "rdkit2d", "morgan")
MORGAN_BITS = 2048


@dataclass
class MoleculeFeatures:
    kind: str
    columns: list
    mean: list
    std: list

    @classmethod
    def fit(cls, kind, smiles, train_indices):
        """Features of `kind`, their statistics from the molecules at `train_indices`; with
        the raw values of every molecule of `smiles` (computed once, here)."""
        raw = raw_features(kind, smiles)
        if kind == "morgan":
            count = raw.shape[1]
            return cls(
                kind, [f"morgan_{i}" for i in range(count)], [0.0] * count, [1.0] * count
            ), raw
        train = raw[np.asarray(train_indices, dtype=int)]
        with np.errstate(all="ignore"):  # a column all NaN in training: mean 0, deviation 1
            mean, std = np.nanmean(train, axis=0), np.nanstd(train, axis=0)
        mean = np.nan_to_num(mean)
        std = np.where(np.isfinite(std) & (std > 1e-8), std, 1.0)
        return cls(kind, list(DESCRIPTORS), mean.tolist(), std.tolist()), raw

    def __len__(self):
        return len(self.columns)

    def compute(self, smiles):
        """[molecules, features] as the model reads them (see transform)."""
        return self.transform(raw_features(self.kind, smiles))

    def transform(self, raw):
        """float32 standardised descriptors; Morgan's log counts as they are, in float16: 2048
        of them a molecule would cost 340 MB a rank on HIV in float32, and 3 significant
        digits hold log(1 + count) for any count a molecule has."""
        if self.kind == "morgan":
            return raw
        values = (raw - np.asarray(self.mean)) / np.asarray(self.std)
        return np.nan_to_num(values, nan=0.0).astype(np.float32)

    def to_dict(self):
        return asdict(self)


def raw_features(kind, smiles):
    if kind == "rdkit2d":
        return molecular_descriptors(smiles, DESCRIPTORS)
    if kind == "morgan":
        counts = morgan_fingerprints(smiles, bits=MORGAN_BITS, counts=True)
        return np.log1p(counts, dtype=np.float32).astype(np.float16)
    raise PartorchError(f"unknown extra features {kind!r}; choose from {', '.join(FEATURE_KINDS)}")


def features_from_dict(description):
    """The features a model was trained with, from its extra_features.json (None: none)."""
    if not description:
        return None
    try:
        return MoleculeFeatures(**description)
    except TypeError:
        keys = sorted(description)
        raise PartorchError(f"extra_features.json holds {keys}, not features") from None
