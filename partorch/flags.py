"""The flags both training scripts take (and the example built on them)."""
import argparse
import sys

from .errors import exit_after_peers
from .loaders import SAMPLERS
from .molecule_csv import SMILES_FORMS
from .splits import DEFAULT_SIZES, SPLITS, parse_sizes
from .tasks import CLASS_WEIGHTS, TASK_KINDS


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def _split_sizes(text):
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text):
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    def exit(self, status=0, message=None):
        if message:
            self._print_message(message, sys.stderr)
        if status:  # a bad flag, on every rank: each says so before torchrun stops them all
            exit_after_peers(status)
        sys.exit(status)

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        if parsed.resume and parsed.output_dir is None:
            self.error("--resume needs --output-dir, the folder of the run to continue")
        return parsed


def build_parser(doc, default_output_dir):
    parser = _Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("dataset", help="CSV file with a SMILES column and one or more label columns")
    _data_flags(add)
    _optimisation_flags(add)
    _model_flags(add)
    _running_flags(add, default_output_dir)
    return parser


def add_molecule_flags(add):
    """Which molecules, labels and split: the flags the training scripts share
    with scripts/baseline_fingerprints.py, so both see identical splits."""
    add("--smiles-column", default="smiles", help="column holding SMILES (default: %(default)s)")
    add("--label-column", nargs="+", default=["p_np"], metavar="COLUMN",
        help="label column(s), separated by spaces or commas; several columns train one output each "
             "(multi-task), empty cells are missing labels (default: p_np)")
    add("--task", choices=TASK_KINDS, default="auto",
        help="classification (0/1 labels, ROC AUC), regression (RMSE), or auto: classification when every "
             "label is 0 or 1 (default: %(default)s)")
    add("--smiles-form", choices=SMILES_FORMS, default="canonical",
        help="canonical: every SMILES rewritten by RDKit, so the model reads the molecule, not the style its "
             "source wrote it in; rows RDKit cannot parse are dropped with a warning. raw: the file's strings "
             "as they are (default: %(default)s)")
    add("--strict", action="store_true",
        help="rows without any label, or whose SMILES RDKit cannot parse (whenever they are parsed: canonical form, "
             "--validate-smiles, scaffold splits), are an error instead of being dropped")
    add("--split", choices=SPLITS, default="stratified",
        help="stratified (by class; random for regression and several tasks), random, scaffold (Bemis-Murcko "
             "groups, largest to train, then dev, then test: DeepChem's, seed-independent) or scaffold_balanced "
             "(chemprop's order: big scaffold groups first, the rest shuffled by the seed) (default: %(default)s)")
    add("--split-sizes", type=_split_sizes, default=DEFAULT_SIZES, metavar="TRAIN,DEV,TEST",
        help="fractions of the molecules; papers' scaffold figures use 0.8,0.1,0.1 (default: 0.72,0.18,0.1, "
             "the tutorial's)")
    add("--random-seed", "--seed", dest="seed", type=int, default=1729,
        help="seed for split, initialisation and batch order (default: %(default)s)")


def _data_flags(add):
    add_molecule_flags(add)
    add("--tokenizer", choices=["smiles", "bytes"], default="smiles",
        help="atom-level SMILES regex or fixed ASCII bytes (default: %(default)s)")
    add("--augment", action="store_true",
        help="each epoch, write every training molecule as a fresh random SMILES")
    add("--tta", type=int, default=0, metavar="K",
        help="score dev and test as the mean over the given SMILES and K random ones "
             "(default: %(default)s)")
    add("--validate-smiles", action="store_true",
        help="with --smiles-form raw: drop (with a warning naming the rows) SMILES that RDKit cannot parse")
    add("--sampler", choices=SAMPLERS, default="bucket",
        help="length-bucketed batches, or torch's DistributedSampler (default: %(default)s)")


def _optimisation_flags(add):
    add("--epochs", type=_positive(int), default=30, help="maximum epochs (default: %(default)s)")
    add("--patience", type=int, default=10,
        help="stop after this many epochs without a better dev score; 0 never stops early (default: %(default)s)")
    add("--batch-size", type=_positive(int), default=64,
        help="GLOBAL batch: each of N processes takes batch/N molecules (default: %(default)s)")
    add("--lr", type=_positive(float), default=1e-3, help="AdamW learning rate (default: %(default)s)")
    add("--weight-decay", type=float, default=1e-4, help="AdamW weight decay (default: %(default)s)")
    add("--accumulate", type=_positive(int), default=1,
        help="cut each rank's share of a batch into this many micro-batches, all-reducing once per step: "
             "less memory, same global batch (default: %(default)s)")
    add("--class-weight", choices=CLASS_WEIGHTS, default="none",
        help="balanced: each label column's positives weighted in the loss by its training negatives per "
             "positive, for rare classes (classification only; default: %(default)s)")
    add("--amp", choices=["off", "bf16", "fp16"], default="off",
        help="mixed precision: bf16 on GPUs and AVX-512 CPUs, fp16 on GPU with loss scaling (default: %(default)s)")


def _model_flags(add):
    add("--embedding-dim", type=_positive(int), default=128, help="token embedding size (default: %(default)s)")
    add("--d-model", type=_positive(int), default=128, help="hidden size (default: %(default)s)")
    add("--num-layers", type=_positive(int), default=3, help="recurrent layers (default: %(default)s)")
    add("--bidirectional", action=argparse.BooleanOptionalAction, default=True,
        help="read molecules in both directions (default: %(default)s)")
    add("--dropout", type=_fraction, default=0.2, help="dropout between layers and in the head (default: %(default)s)")


def _running_flags(add, default_output_dir):
    add("--output-dir", default=None,
        help="TensorBoard events, metrics.json, the best model, snapshots; used as given "
             f"(default: a new {default_output_dir}/version_N per run)")
    add("--num-workers", type=int, default=0,
        help="DataLoader worker processes; the data is pre-tokenized, so 0 is usually fastest (default: %(default)s)")
    add("--threads", type=_positive(int), default=None,
        help="CPU threads per process (default: available cores / processes on this host)")
    add("--bucket-mb", type=_positive(int), default=25,
        help="DDP gradient bucket size in MB; smaller buckets start all-reducing earlier in backward "
             "(default: %(default)s)")
    add("--dist-timeout", type=_positive(int), default=300,
        help="seconds any collective may wait for a peer before failing; rank 0 scoring dev alone sends a "
             "heartbeat meanwhile, so a long evaluation does not count (default: %(default)s)")
    add("--distributed-eval", action="store_true",
        help="every rank scores its share of dev and test and the predictions are gathered "
             "(default: rank 0 scores them alone)")
    add("--test-every-epoch", action="store_true",
        help="also score the test split every epoch, for the curves (the best epoch is chosen on dev either "
             "way; off by default, so that nobody is tempted to choose by test)")
    add("--resume", action="store_true",
        help="continue from OUTPUT_DIR/checkpoints/last.pt; needs --output-dir (automatic after a torchrun "
             "restart)")
    add("--quiet", action="store_true", help="no progress bar; warnings and the final line only")


# Flags that change how or where a run executes, not what it computes (and
# `device`, which the scripts add to the flags: cuda:0 and cuda:1 are one run).
NOT_RESULT_DEFINING = {"output_dir", "num_workers", "threads", "bucket_mb", "dist_timeout", "distributed_eval",
                       "resume", "quiet", "epochs", "patience", "device", "test_every_epoch"}


def run_hparams(args):
    """The flags that define a run's result: saved with the model, and
    compared before a snapshot is resumed (a run may be extended with more
    --epochs, but not continued with another seed or learning rate)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in NOT_RESULT_DEFINING}
