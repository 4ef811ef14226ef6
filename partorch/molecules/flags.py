"""The flags of the molecule parts: which molecules, labels and split (shared
with benchmarks/baseline_fingerprints.py, so both see identical splits), how
SMILES become tokens, and the recurrent model's size. A script adds them to
its own `--help` groups; a script adapted to other data drops them."""

import argparse
from pathlib import Path

from ..ddp.flags import FlagParser
from .features import FEATURE_KINDS
from .splits import DEFAULT_SIZES, SPLITS, parse_sizes
from .table import MAX_SMILES_LENGTH, SMILES_FORMS
from .tasks import CLASS_WEIGHTS, TASK_KINDS

# The encoder that ships with the project (see its README), found from the package's place
SHIPPED_ENCODER = Path(__file__).resolve().parents[2] / "models" / "moses_descriptors"
# --preset (a script's parser.add_presets): flag values by name. quick is the defaults, what the
# usage line runs on BBBP (under 2 minutes on a slow 2-core CPU); accurate is the recipe
# docs/accuracy.md chose on dev scores (never test's), at several times the cost: the shipped
# encoder fine-tuned, with all of RDKit's 2D descriptors and Morgan counts beside its encoding
# (15 descriptors in their place scored lower on dev on Lipophilicity, ESOL, SIDER and HIV, and
# level on BBBP's scaffold split).
PRESETS = {
    "quick": {},
    "accurate": {
        "init-from": str(SHIPPED_ENCODER),
        "extra-features": "rdkit2d-full+morgan",
        "augment": True,
        "epochs": 100,
        "patience": 20,
    },
}


def molecule_data_options(args):
    """molecule_data's keyword arguments from the flags add_molecule_flags added (and --seed):
    one mapping, rather than each script spelling out every flag."""
    return dict(
        smiles_column=args.smiles_column,
        label_columns=args.label_column,
        task=args.task,
        smiles_form=args.smiles_form,
        strict=args.strict,
        split=args.split,
        split_sizes=args.split_sizes,
        validate_smiles=args.validate_smiles,
        seed=args.seed,
        tokenizer=args.tokenizer,
        augment=args.augment,
        tta=args.tta,
        init_from=args.init_from,
        class_weight=args.class_weight,
        max_smiles_length=args.max_smiles_length,
        extra_features=args.extra_features,
    )


def _split_sizes(text):
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_molecule_flags(data, model=None):
    """Add the molecule data flags to the argument group `data` and, when
    given, the SMILES network's flags to the group `model`."""
    add_split_flags(data)
    add = data.add_argument
    add(
        "--tokenizer",
        choices=["smiles", "bytes"],
        default="smiles",
        help="atom-level SMILES regex or fixed ASCII bytes",
    )
    add(
        "--max-smiles-length",
        type=FlagParser.positive(int),
        default=MAX_SMILES_LENGTH,
        metavar="CHARS",
        help="drop longer SMILES (with a warning naming their rows): one would pad its whole "
        "batch to its length; the default, a fixed value, keeps every MoleculeNet molecule "
        "(SIDER's longest has 1,340)",
    )
    add(
        "--augment",
        action="store_true",
        help="each epoch, write every training molecule as a fresh random SMILES",
    )
    add(
        "--tta",
        type=FlagParser.count,
        default=0,
        metavar="K",
        help="score dev and test as the mean over the given SMILES and K random ones",
    )
    add(
        "--validate-smiles",
        action="store_true",
        help="with --smiles-form raw: drop (with a warning naming the rows) SMILES that RDKit "
        "cannot parse",
    )
    add(
        "--class-weight",
        choices=CLASS_WEIGHTS,
        default="none",
        help="balanced: each label column's positives weighted in the loss by its training "
        "negatives per positive, for rare classes (classification only)",
    )
    add(
        "--extra-features",
        choices=FEATURE_KINDS,
        default="none",
        help="computed features the head reads beside the SMILES encoding: rdkit2d (15 RDKit "
        "2D descriptors, standardised on the training split), rdkit2d-full (all of RDKit's "
        "2D descriptors, about 200, log-scaled, then standardised; 12 times the cost), morgan "
        "(log counts of 2048 Morgan environments, radius 2), or rdkit2d+morgan, "
        "rdkit2d-full+morgan (both); saved with the model for scripts/predict.py",
    )
    if model is not None:
        add_encoder_flags(model)
        add_head_flags(model)
        model.add_argument(
            "--init-from",
            metavar="FOLDER",
            help="start the embedding and LSTM from a pretrained encoder (a folder of "
            "scripts/pretrain_ddp.py, or models/...): its sizes and vocabulary, extended by "
            "this data's new tokens; see also --freeze-pretrained-epochs",
        )


def add_split_flags(data):
    """The file's columns, the task and the split."""
    add = data.add_argument
    add("dataset", help="CSV file with a SMILES column and one or more label columns")
    add("--smiles-column", default="smiles", help="column holding SMILES")
    add(
        "--label-column",
        nargs="+",
        default=["p_np"],
        metavar="COLUMN",
        help="label column(s), separated by spaces or commas; several columns train one output "
        "each (multi-task), empty cells are missing labels",
    )
    add(
        "--task",
        choices=TASK_KINDS,
        default="auto",
        help="classification (0/1 labels, ROC AUC), multiclass (one column of 3 to 20 whole "
        "numbers, softmax), regression (RMSE), or auto: classification when every label is 0 or "
        "1, multiclass for such a column, regression otherwise",
    )
    add(
        "--smiles-form",
        choices=SMILES_FORMS,
        default="canonical",
        help="canonical: every SMILES rewritten by RDKit, so the model reads the molecule, not "
        "the style its source wrote it in; rows RDKit cannot parse are dropped with a "
        "warning. raw: the file's strings as they are",
    )
    add(
        "--strict",
        action="store_true",
        help="rows without any label, or whose SMILES RDKit cannot parse (whenever they are "
        "parsed), are an error instead of being dropped",
    )
    add(
        "--split",
        choices=SPLITS,
        default="stratified",
        help="stratified (by class; random for regression and several tasks), random, scaffold "
        "(Bemis-Murcko groups, largest to train, then dev, then test: DeepChem's, "
        "seed-independent) or scaffold_balanced (chemprop's: big groups first, the rest "
        "shuffled by the seed)",
    )
    add(
        "--split-sizes",
        type=_split_sizes,
        default=DEFAULT_SIZES,
        metavar="TRAIN,DEV,TEST",
        help="fractions of the molecules; papers' scaffold figures use 0.8,0.1,0.1",
    )


def add_encoder_flags(model):
    """The embedding and LSTM's sizes: what a classifier and a pretraining run share."""
    add = model.add_argument
    add("--embedding-dim", type=FlagParser.positive(int), default=128, help="token embedding size")
    add("--d-model", type=FlagParser.positive(int), default=64, help="hidden size")
    add("--num-layers", type=FlagParser.positive(int), default=2, help="recurrent layers")
    add(
        "--bidirectional",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read molecules in both directions",
    )
    add(
        "--dropout",
        type=FlagParser.fraction,
        default=0.2,
        help="dropout between layers and in the head",
    )


def add_head_flags(model):
    """The classifier's head, which pretraining replaces with its own."""
    add = model.add_argument
    add(
        "--head-size",
        type=FlagParser.positive(int),
        metavar="UNITS",
        help="hidden units of the head that reads the encoding (and --extra-features); "
        "default: --d-model (the encoder's with --init-from)",
    )
    add(
        "--feature-dropout",
        type=FlagParser.fraction,
        default=0.0,
        help="with --extra-features: the chance that each feature is zeroed in a training step, "
        "so that the head cannot lean on a few rare ones",
    )
