"""Computed molecular features the network reads beside its SMILES encoding (--extra-features),
as chemprop's feature generators add them to its graph encoding.

    rdkit2d  15 RDKit 2D descriptors (chem.DESCRIPTORS), standardised with the training
             split's mean and deviation; a descriptor RDKit cannot compute becomes that mean (0)
    rdkit2d-full  every 2D descriptor of the installed RDKit (217, as chemprop's rdkit_2d
             generator reads about 200), each as sign(x) log(1 + |x|) and then standardised as
             rdkit2d: some span 30 orders of magnitude (Ipc). 12 times rdkit2d's cost
             (benchmarks/features.py): computed once per node and data set, over a pool of
             the node's cores, and kept in the cache for the next run
    morgan   Morgan counts (radius 2, 2048 bits) as log(1 + count): most bits are rare, and
             standardising one seen twice in training would turn a test molecule's into a
             large number; computed once per node and data set and kept in the cache too
    rdkit2d+morgan, rdkit2d-full+morgan  both, the descriptors first, each part treated as
             on its own

The fitted features (kind, columns, statistics) are saved beside the model as
extra_features.json, so that scripts/predict.py computes what the model was trained on.
"""

from dataclasses import asdict, dataclass

import numpy as np

from ..ddp.errors import PartorchError
from .cached import kept
from .chem import (
    DESCRIPTORS,
    all_descriptor_names,
    descriptors_of,
    fingerprints_of,
    parsed_molecules,
)
from .chunked import in_chunks

FEATURE_KINDS = (
    "none",
    "rdkit2d",
    "morgan",
    "rdkit2d+morgan",
    "rdkit2d-full",
    "rdkit2d-full+morgan",
)
MORGAN_BITS = 2048
FEATURES_FORMAT = "partorch-features-1"  # raises every cache key when the computation changes
# From this many molecules a pool of the node's cores computes the descriptors: all of RDKit's
# cost about 10 ms a molecule (chunked.POOL_MIN_MOLECULES is for 0.3 ms).
DESCRIPTORS_POOL_MIN = 5_000


@dataclass
class MoleculeFeatures:
    kind: str
    columns: list
    mean: list
    std: list

    @classmethod
    def fit(cls, kind, smiles, train_indices, cache=False):
        """Features of `kind`, their statistics from the molecules at `train_indices`; with
        the raw values of every molecule of `smiles` (computed once, here; with `cache`, they
        may come from the cache: see _descriptor_values and _morgan_values). Morgan columns keep
        mean 0 and deviation 1: they are not standardised."""
        names = descriptor_names(kind)
        raw = raw_features(kind, smiles, names, cache)
        described = len(names)
        mean, std = np.zeros(raw.shape[1]), np.ones(raw.shape[1])
        if described:
            train = raw[np.asarray(train_indices, dtype=int), :described].astype(np.float64)
            with np.errstate(all="ignore"):  # a column all NaN in training: mean 0, deviation 1
                train_mean, train_std = np.nanmean(train, axis=0), np.nanstd(train, axis=0)
            mean[:described] = np.nan_to_num(train_mean)
            std[:described] = np.where(np.isfinite(train_std) & (train_std > 1e-8), train_std, 1)
        columns = [*names, *_morgan_columns(raw.shape[1] - described)]
        return cls(kind, columns, mean.tolist(), std.tolist()), raw

    def __len__(self):
        return len(self.columns)

    @property
    def descriptor_columns(self):
        """The descriptors' names, as trained with: computed by name, so that a newer RDKit
        with more descriptors still gives a saved model its own columns."""
        return [column for column in self.columns if not column.startswith("morgan_")]

    def compute(self, smiles):
        """[molecules, features] as the model reads them (see transform)."""
        return self.transform(raw_features(self.kind, smiles, self.descriptor_columns))

    def transform(self, raw):
        """Standardised descriptors, 0 where RDKit could not compute one; Morgan's log counts
        as they are. float32, or float16 with Morgan counts: 2048 of them a molecule would
        cost 340 MB a rank on HIV in float32, and 3 significant digits hold log(1 + count)
        for any count a molecule has, as they hold a standardised descriptor's first 3."""
        described = len(self.descriptor_columns)
        dtype = np.float16 if described < raw.shape[1] else np.float32
        # a copy wherever descriptors are scaled below (their raw dtype is wider); Morgan
        # counts alone are already float16 and returned as they are
        values = raw.astype(dtype, copy=False)
        if described:
            mean, std = np.asarray(self.mean[:described]), np.asarray(self.std[:described])
            scaled = (raw[:, :described].astype(np.float64) - mean) / std
            # a molecule far out on a descriptor nearly constant in training would pass
            # float16's 65,504 and reach the network as inf
            values[:, :described] = np.clip(np.nan_to_num(scaled, nan=0.0), -1e4, 1e4)
        return values

    def to_dict(self):
        return asdict(self)


def descriptor_names(kind):
    """The descriptors a kind of features holds, in order (none for Morgan counts alone)."""
    if kind not in FEATURE_KINDS[1:]:
        choices = ", ".join(FEATURE_KINDS)
        raise PartorchError(f"unknown extra features {kind!r}; choose from {choices}")
    if kind.startswith("rdkit2d-full"):
        return all_descriptor_names()
    return DESCRIPTORS if kind.startswith("rdkit2d") else ()


def raw_features(kind, smiles, names, cache=False):
    """[molecules, columns] of `kind` with the descriptors `names`: descriptors in float64 (NaN
    where RDKit cannot compute one), Morgan log counts in float16, both together in float32.
    With `cache`, both come from the cache (see _descriptor_values and _morgan_values). Each
    part parses its molecules itself: each is kept on its own, and one read back needs none."""
    descriptor_names(kind)  # an unknown kind stops here, with the choices
    parts = []
    if names:
        parts.append(_descriptor_values(kind, smiles, names, cache))
    if "morgan" in kind:
        parts.append(_morgan_values(smiles, cache))
    if len(parts) == 1:
        return parts[0]
    return np.hstack([part.astype(np.float32) for part in parts])


def _descriptors_of_smiles(smiles, kind, names):
    """The descriptors `names` of each molecule, log-scaled for rdkit2d-full."""
    values = descriptors_of(parsed_molecules(smiles), names)
    if kind.startswith("rdkit2d-full"):
        values = np.sign(values) * np.log1p(np.abs(values))
    return values


def _descriptor_values(kind, smiles, names, cache):
    """_descriptors_of_smiles over the node's cores (all of RDKit's descriptors cost about 10
    ms a molecule: benchmarks/features.py); with `cache`, kept in the cache (cache_root()/
    features) under a key of the molecules, the kind, the names and RDKit's version, so that
    the seeds of one data set and the ranks of a node compute them once (see kept_in_cache)."""
    described = kind.split("+")[0]  # rdkit2d+morgan's descriptors are rdkit2d's

    def compute():
        parts = in_chunks(
            _descriptors_of_smiles,
            smiles,
            kind,
            names,
            description=f"{described} descriptors",
            least=DESCRIPTORS_POOL_MIN,
        )
        return np.concatenate(parts)

    return kept(
        compute,
        cache,
        "features",
        FEATURES_FORMAT,
        described,
        smiles,
        list(names),
        suffix=".npy",
        save=lambda values, file: np.save(file, values),
        load=np.load,
        fits=lambda values: values.dtype.kind == "f" and values.shape == (len(smiles), len(names)),
        what=f"{len(smiles):,} molecules' descriptors",
    )


def _morgan(counts):
    return np.log1p(counts, dtype=np.float32).astype(np.float16)


def _morgan_values(smiles, cache):
    """_morgan of every molecule, computed over the node's cores as the non-zero counts only
    (about 50 of a molecule's 2048: HIV's rows would take 170 MB, and computing them about 15
    s), kept in the cache that way with `cache`, as in _descriptor_values."""

    def compute():
        return _joined(in_chunks(_nonzero_counts_of_smiles, smiles, description="Morgan counts"))

    entries = kept(
        compute,
        cache,
        "features",
        FEATURES_FORMAT,
        "morgan",
        smiles,
        MORGAN_BITS,
        suffix=".npz",
        save=lambda arrays, file: np.savez(file, **arrays),
        load=_load_npz,
        fits=lambda arrays: _nonzero_fits(arrays, len(smiles)),
        what=f"{len(smiles):,} molecules' Morgan counts",
    )
    values = np.zeros((len(smiles), MORGAN_BITS), dtype=np.float16)
    molecules = np.repeat(np.arange(len(smiles)), np.diff(entries["starts"]))
    values[molecules, entries["bits"]] = _morgan(entries["counts"])
    return values


def _nonzero_counts_of_smiles(smiles):
    """A molecule's entries are bits[starts[i]:starts[i + 1]] and the same slice of counts."""
    counts = fingerprints_of(parsed_molecules(smiles), bits=MORGAN_BITS, counts=True)
    molecules, bits = np.nonzero(counts)
    starts = np.searchsorted(molecules, np.arange(len(counts) + 1))
    return {"starts": starts, "bits": bits.astype(np.uint16), "counts": counts[molecules, bits]}


def _joined(parts):
    """One _nonzero_counts_of_smiles of the molecules of `parts`, in order."""
    shifts = np.cumsum([0, *(len(part["bits"]) for part in parts)])
    starts = [part["starts"][:-1] + shift for part, shift in zip(parts, shifts)]
    return {
        "starts": np.concatenate([*starts, shifts[-1:]]),
        "bits": np.concatenate([part["bits"] for part in parts]),
        "counts": np.concatenate([part["counts"] for part in parts]),
    }


def _load_npz(path):
    with np.load(path) as arrays:
        return {name: arrays[name] for name in arrays.files}


def _nonzero_fits(arrays, molecules):
    """Whether `arrays` are _joined's for `molecules` molecules (anything else is computed
    again: negative or float indices would otherwise be read as indices)."""
    if set(arrays) != {"starts", "bits", "counts"}:
        return False
    starts, bits, counts = arrays["starts"], arrays["bits"], arrays["counts"]
    if starts.shape != (molecules + 1,) or starts.dtype.kind not in "iu":
        return False
    if bits.dtype.kind != "u" or counts.dtype.kind != "u" or len(bits) != len(counts):
        return False
    ordered = starts[0] == 0 and starts[-1] == len(bits) and np.all(np.diff(starts) >= 0)
    return bool(ordered and np.all(bits < MORGAN_BITS))


def _morgan_columns(count):
    return [f"morgan_{i}" for i in range(count)]


def features_from_dict(description):
    """The features a model was trained with, from its extra_features.json (None: none)."""
    if not description:
        return None
    try:
        return MoleculeFeatures(**description)
    except TypeError:
        keys = sorted(description)
        raise PartorchError(f"extra_features.json holds {keys}, not features") from None
