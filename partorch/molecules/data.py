"""From a CSV of molecules to what a training script trains on: the table
read and checked, the task chosen, the split, the vocabulary and the three
SMILES datasets, as one TrainingData. Every rank builds the same from the
same file and flags (no randomness outside `seed`), so nothing is sent
between ranks; the digests let a script check that."""

from ..ddp.data import TrainingData
from ..ddp.distributed import digest
from ..ddp.logs import log
from .datasets import smiles_dataset
from .features import MoleculeFeatures
from .pretraining import pretrained_tokens
from .splits import DEFAULT_SIZES, describe_split, split_molecules
from .table import MAX_SMILES_LENGTH, drop_long_smiles, read_molecule_csv, timed
from .tasks import build_task, choose_task_kind
from .tokenizer import build_tokenizer, unseen_token_warning


def molecule_data(
    path,
    *,
    smiles_column="smiles",
    label_columns=("p_np",),
    task="auto",
    smiles_form="canonical",
    strict=False,
    validate_smiles=False,
    split="stratified",
    split_sizes=DEFAULT_SIZES,
    seed=0,
    tokenizer="smiles",
    augment=False,
    tta=0,
    class_weight="none",
    max_smiles_length=MAX_SMILES_LENGTH,
    init_from=None,
    extra_features="none",
):
    """TrainingData for the molecules of a CSV; the arguments are the flags
    of `add_molecule_flags` (see their help) and the run's seed. With `init_from`
    (a pretrained encoder's folder) the vocabulary extends the encoder's. With
    `extra_features` the datasets carry computed features too (`feature_count` of them),
    their statistics from the training split, described as "extra_features" (saved as
    extra_features.json)."""
    parse = validate_smiles or "scaffold" in split
    # RDKit's work per molecule comes from the cache after the first run: see cached_strings
    table = read_molecule_csv(
        path,
        smiles_column,
        label_columns,
        strict=strict,
        smiles_form=smiles_form,
        parse=parse,
        cache=True,
    )
    table = drop_long_smiles(table, max_smiles_length, strict)
    kind = choose_task_kind(task, table)
    with timed(f"{split} split"):
        splits = split_molecules(table, split, seed, kind, split_sizes, cache=True)
    the_task = build_task(kind, table, splits, class_weight)
    base_tokens = pretrained_tokens(init_from) if init_from else ()
    with timed(f"{tokenizer} vocabulary"):
        vocabulary = build_tokenizer(
            tokenizer,
            table,
            augment or tta > 0,
            base_tokens,
            canonical=smiles_form == "canonical",
        )
    unseen = unseen_token_warning(table, base_tokens, path) if init_from else None
    features, feature_rows = _features(extra_features, table.smiles, splits.train)
    datasets = _datasets(table, splits, vocabulary, seed, augment, tta, feature_rows)
    log.info(
        "%s: train %d, dev %d, test %d molecules (%s split)",
        path,
        len(splits.train),
        len(splits.dev),
        len(splits.test),
        split,
    )
    return TrainingData(
        *datasets,
        the_task,
        descriptions={
            "tokenizer": vocabulary.to_dict(),
            "splits": describe_split(table, splits, split, seed, split_sizes),
            **({"extra_features": features.to_dict()} if features else {}),
        },
        digests={
            "molecules": digest([table.smiles, table.labels.tolist()]),
            "split": digest(splits.as_lists()),
            "vocabulary": digest(vocabulary.to_dict()),
            # the statistics too: nodes whose RDKit versions compute other descriptors disagree
            **({"extra features": digest(features.to_dict())} if features else {}),
        },
        warnings=table.warnings + ([unseen] if unseen else []),
        tta=tta,
    )


def _features(kind, smiles, train_indices):
    """(the fitted features or None, every molecule's row of them or None)."""
    if kind == "none":
        return None, None
    with timed(f"{kind} features of {len(smiles):,} molecules"):
        features, raw = MoleculeFeatures.fit(kind, smiles, train_indices, cache=True)
        return features, features.transform(raw)


def _datasets(table, splits, vocabulary, seed, augment, tta, feature_rows=None):
    """Train, dev and test SMILES datasets; each molecule is tokenized here, once."""

    def subset(indices, rewritable):  # a molecule's random SMILES come from (seed, epoch, its row)
        return smiles_dataset(
            table.smiles, table.labels, vocabulary, indices, rewritable, seed, feature_rows
        )

    with timed(f"tokenized {len(table.smiles):,} molecules"):
        return (
            subset(splits.train, augment),
            subset(splits.dev, tta > 0),
            subset(splits.test, tta > 0),
        )
