"""Computed molecular features the network reads beside its SMILES encoding (--extra-features),
as chemprop's feature generators add them to its graph encoding.

    rdkit2d  15 RDKit 2D descriptors (chem.DESCRIPTORS), standardised with the training
             split's mean and deviation; a descriptor RDKit cannot compute becomes that mean (0)
    rdkit2d-full  every 2D descriptor of the installed RDKit (217, as chemprop's rdkit_2d
             generator reads about 200), each as sign(x) log(1 + |x|) and then standardised as
             rdkit2d: some span 30 orders of magnitude (Ipc). About 30 times rdkit2d's cost
             (7 ms a molecule on one core here; every rank computes them all)
    morgan   Morgan counts (radius 2, 2048 bits) as log(1 + count): most bits are rare, and
             standardising one seen twice in training would turn a test molecule's into a
             large number
    rdkit2d+morgan, rdkit2d-full+morgan  both, the descriptors first, each part treated as
             on its own

The fitted features (kind, columns, statistics) are saved beside the model as
extra_features.json, so that scripts/predict.py computes what the model was trained on.
"""

from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
import multiprocessing

import numpy as np

from ..ddp.distributed import available_cores, digest
from ..ddp.errors import PartorchError
from ..ddp.files import atomic_write, cache_root, node_lock
from ..ddp.logs import log
from .chem import (
    DESCRIPTORS,
    all_descriptor_names,
    descriptors_of,
    fingerprints_of,
    parsed_molecules,
    rdkit_version,
)

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
# Below this many molecules one process computes descriptors faster than starting a pool.
POOL_MIN_MOLECULES = 5_000
POOL_CHUNK = 1_000  # molecules per task sent to a pool process


@dataclass
class MoleculeFeatures:
    kind: str
    columns: list
    mean: list
    std: list

    @classmethod
    def fit(cls, kind, smiles, train_indices, cache=False):
        """Features of `kind`, their statistics from the molecules at `train_indices`; with
        the raw values of every molecule of `smiles` (computed once, here; with `cache`, the
        descriptors may come from the cache: see _cached_descriptors). Morgan columns keep
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
            values[:, :described] = np.nan_to_num(scaled, nan=0.0)
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
    With `cache`, the descriptors come from the cache (see _cached_descriptors)."""
    descriptor_names(kind)  # a known kind
    molecules = parsed_molecules(smiles)  # once, for both kinds
    parts = []
    if names:
        if cache:
            parts.append(_cached_descriptors(kind, smiles, molecules, names))
        else:
            parts.append(_descriptors(kind, molecules, names))
    if "morgan" in kind:
        counts = fingerprints_of(molecules, bits=MORGAN_BITS, counts=True)
        parts.append(np.log1p(counts, dtype=np.float32).astype(np.float16))
    if len(parts) == 1:
        return parts[0]
    return np.hstack([part.astype(np.float32) for part in parts])


def _descriptors(kind, molecules, names):
    values = descriptors_of(molecules, names)
    if kind.startswith("rdkit2d-full"):
        values = np.sign(values) * np.log1p(np.abs(values))
    return values


def _descriptors_of_smiles(kind, smiles, names):
    return _descriptors(kind, parsed_molecules(smiles), names)


def _descriptors_over_cores(kind, smiles, molecules, names):
    """_descriptors, over a pool of the node's cores when there are enough molecules: the
    process that builds the cache is the node's only one computing them (the other ranks
    wait for it), and all of RDKit's descriptors cost about 7 ms a molecule."""
    workers = min(available_cores(), -(-len(smiles) // POOL_CHUNK))
    if len(smiles) < POOL_MIN_MOLECULES or workers < 2:
        return _descriptors(kind, molecules, names)
    chunks = [smiles[i : i + POOL_CHUNK] for i in range(0, len(smiles), POOL_CHUNK)]
    repeat = [kind] * len(chunks), [names] * len(chunks)
    # spawn, not fork: the caller holds threads (torch's, a process group's)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return np.concatenate(list(pool.map(_descriptors_of_smiles, repeat[0], chunks, repeat[1])))


def _cached_descriptors(kind, smiles, molecules, names):
    """_descriptors, kept in the cache (cache_root()/features) under a key of the molecules,
    the kind, the names and RDKit's version: the seeds of one data set and the ranks of a node
    compute them once (all of RDKit's descriptors take minutes on HIV). The first process of
    a node computes, under a lock; the others wait, then read. Morgan counts are not kept:
    they cost little to compute and much to store."""
    described = kind.split("+")[0]  # rdkit2d+morgan's descriptors are rdkit2d's
    key = digest([FEATURES_FORMAT, described, list(names), rdkit_version(), list(smiles)])
    path = cache_root() / "features" / f"{described}-{key[:16]}.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    with node_lock(path.with_name(f".{path.name}.lock")):
        try:
            values = np.load(path)
            log.info("read %d molecules' descriptors from %s", len(values), path)
            return values
        except FileNotFoundError:
            pass
        except (OSError, ValueError):  # a damaged file: computed again, and replaced
            log.warning("%s: unreadable, computing its descriptors again", path)
        values = _descriptors_over_cores(kind, smiles, molecules, names)
        atomic_write(path, lambda f: np.save(f, values))
        log.info("computed %d molecules' descriptors into %s", len(values), path)
        return values


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
