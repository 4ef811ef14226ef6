"""Prepare a CSV of molecules once, for every rank of every later run to memory-map.

    python scripts/prepare_data.py dataset/MOSES_train.csv.gz --output-dir data/moses_train
    python scripts/prepare_data.py dataset/MOSES_test.csv.gz --output-dir data/moses_test \\
        --vocabulary-from data/moses_train --vocabulary fixed
    torchrun --standalone --nproc-per-node 2 scripts/pretrain_ddp.py data/moses_train

The folder holds the molecules' token ids concatenated (tokens.bin), where each molecule
starts (offsets.npy), the labels (labels.npy, NaN where a cell is empty), each molecule's row
in the CSV (rows.npy) and meta.json: the source's SHA-256, the options, the vocabulary, the
counts and the rows skipped with the reason. It is written beside its place and renamed into
it, so a reader never meets half of one; running the command again reuses it when the source
and the options are unchanged and rebuilds it otherwise. RDKit's canonical SMILES are computed
by a pool of processes, one a core. A training script given a CSV prepares it itself, once, in
its cache folder (see partorch.ddp.files.cache_root).
"""

import os
import sys

from partorch import DataError, FlagParser, run_main, setup_logging
from partorch.molecules.chem import DESCRIPTORS
from partorch.molecules.prepared import (
    VOCABULARY_MODES,
    PrepareOptions,
    base_vocabulary,
    ensure_prepared,
    read_meta,
)
from partorch.molecules.table import MAX_SMILES_LENGTH, SMILES_FORMS


def build_parser():
    parser = FlagParser(__doc__)
    add = parser.add_argument
    add("csv", help="CSV file (or .csv.gz) with a SMILES column")
    add("--output-dir", help="the prepared folder (default: the cache's folder for this CSV)")
    add("--smiles-column", default="smiles", help="column of SMILES (any letter case)")
    add("--label-column", nargs="*", default=[], metavar="COLUMN", help="label columns, if any")
    add("--smiles-form", choices=SMILES_FORMS, default="canonical", help="as in training")
    add("--max-smiles-length", type=FlagParser.positive(int), default=MAX_SMILES_LENGTH)
    add(
        "--vocabulary-from",
        metavar="FOLDER",
        help="a prepared folder or a pretrained encoder whose vocabulary this corpus uses",
    )
    add(
        "--vocabulary",
        choices=VOCABULARY_MODES,
        default=None,
        help="build: this corpus's own tokens; with --vocabulary-from, fixed: unknown tokens "
        "become <unk> (a held-out set), extend: they get new ids after the given ones "
        "(default: build, or extend with --vocabulary-from)",
    )
    add(
        "--descriptors",
        action="store_true",
        help=f"also compute {len(DESCRIPTORS)} RDKit 2D descriptors a molecule (about 1 ms a "
        "molecule on one core), for pretrain_ddp.py --objective descriptors",
    )
    add("--workers", type=FlagParser.positive(int), help="processes (default: one a core)")
    add("--quiet", action="store_true", help="no progress bar")
    return parser


def main(args):
    setup_logging(0, args.quiet)
    mode = args.vocabulary or ("extend" if args.vocabulary_from else "build")
    if (mode == "build") != (args.vocabulary_from is None):
        raise DataError("--vocabulary fixed and extend take --vocabulary-from; build does not")
    options = PrepareOptions(
        smiles_column=args.smiles_column,
        label_columns=tuple(args.label_column),
        smiles_form=args.smiles_form,
        max_smiles_length=args.max_smiles_length,
        vocabulary=mode,
        base_tokens=base_vocabulary(args.vocabulary_from) if args.vocabulary_from else (),
        descriptors=DESCRIPTORS if args.descriptors else (),
    )
    folder = ensure_prepared(args.csv, options, args.output_dir, args.workers)
    meta = read_meta(folder)
    for warning in meta["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    unseen = meta["molecules_with_unseen_tokens"]
    print(
        f"{folder}: {meta['molecules']:,} molecules, {meta['tokens']:,} tokens, "
        f"vocabulary of {len(meta['tokenizer']['tokens'])}"
        + (f", {len(meta['descriptor_columns'])} descriptors" if args.descriptors else "")
        + (f", {unseen:,} molecules with tokens the given vocabulary lacks" if unseen else "")
        + f"; built in {meta['seconds']:.1f} s from {os.path.basename(args.csv)} "
        f"(sha256 {meta['source']['sha256'][:12]})"
    )


if __name__ == "__main__":
    run_main(main, build_parser())
