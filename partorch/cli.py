"""What the two training scripts share: flags, logging, data preparation,
error reporting and the end-of-run report. The scripts themselves show only
what differs between one process and DDP."""
import argparse
import hashlib
from dataclasses import dataclass
import json
import logging
import os
from pathlib import Path
import random
import re
import sys
import time

import numpy as np
import torch

from .checkpoint import CheckpointError, atomic_write_json, ensure_writable_dir, load_state, save_model_dir
from .chem import augmentation_vocabulary_strings, invalid_smiles_rows
from .data import SPLITS, DataError, MoleculeTable, Splits, drop_rows, read_smiles_csv, split_indices
from .distributed import assert_same_on_all_ranks, check_on_all_ranks
from .errors import PartorchError
from .plots import roc_figure, save_figure, training_curves_figure
from .tokenizer import build_tokenizer

log = logging.getLogger("partorch")


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def _fraction(text):
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def build_parser(doc, default_output_dir):
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("dataset", help="CSV file with a SMILES column and a 0/1 label column")
    # -- data
    add("--smiles-column", default="smiles", help="column holding SMILES (default: %(default)s)")
    add("--label-column", default="p_np", help="column holding 0/1 labels (default: %(default)s)")
    add("--tokenizer", choices=["smiles", "bytes"], default="smiles",
        help="atom-level SMILES regex or fixed ASCII bytes (default: %(default)s)")
    add("--strict", action="store_true", help="rows without a label are an error instead of being dropped")
    add("--split", choices=SPLITS, default="stratified",
        help="stratified (10 %% test, 20 %% of the rest dev), random, or scaffold (Bemis-Murcko groups, "
             "largest to train; needs RDKit) (default: %(default)s)")
    add("--augment", action="store_true",
        help="each epoch, write every training molecule as a fresh random SMILES (needs RDKit)")
    add("--tta", type=int, default=0, metavar="K",
        help="score dev and test as the mean over the canonical SMILES and K random ones (needs RDKit) "
             "(default: %(default)s)")
    add("--validate-smiles", action="store_true",
        help="drop (with a warning naming the rows) SMILES that RDKit cannot parse; needs pip install -e '.[chem]'")
    add("--sampler", choices=["bucket", "random"], default="bucket",
        help="length-bucketed batches, or torch's DistributedSampler (default: %(default)s)")
    # -- optimisation
    add("--epochs", type=_positive(int), default=30, help="maximum epochs (default: %(default)s)")
    add("--patience", type=int, default=10,
        help="stop after this many epochs without a better dev ROC AUC; 0 never stops early (default: %(default)s)")
    add("--batch-size", type=_positive(int), default=64,
        help="GLOBAL batch: each of N processes takes batch/N molecules (default: %(default)s)")
    add("--lr", type=_positive(float), default=1e-3, help="AdamW learning rate (default: %(default)s)")
    add("--accumulate", type=_positive(int), default=1,
        help="cut each rank's share of a batch into this many micro-batches, all-reducing once per step: "
             "less memory, same global batch (default: %(default)s)")
    add("--amp", choices=["off", "bf16", "fp16"], default="off",
        help="mixed precision: bf16 on CPU or GPU, fp16 on GPU with loss scaling (default: %(default)s)")
    add("--weight-decay", type=float, default=1e-4, help="AdamW weight decay (default: %(default)s)")
    add("--random-seed", "--seed", dest="seed", type=int, default=1729,
        help="seed for split, initialisation and batch order (default: %(default)s)")
    # -- model
    add("--embedding-dim", type=_positive(int), default=128, help="token embedding size (default: %(default)s)")
    add("--d-model", type=_positive(int), default=128, help="LSTM hidden size (default: %(default)s)")
    add("--num-layers", type=_positive(int), default=3, help="LSTM layers (default: %(default)s)")
    add("--bidirectional", action=argparse.BooleanOptionalAction, default=True,
        help="read molecules in both directions (default: %(default)s)")
    add("--dropout", type=_fraction, default=0.2, help="dropout between layers and in the head (default: %(default)s)")
    # -- running
    add("--output-dir", default=default_output_dir,
        help="TensorBoard events, metrics.json, the best model (default: %(default)s)")
    add("--num-workers", type=int, default=0,
        help="DataLoader worker processes; the data is pre-tokenized, so 0 is usually fastest (default: %(default)s)")
    add("--threads", type=_positive(int), default=None,
        help="CPU threads per process (default: available cores / processes on this host)")
    add("--bucket-mb", type=_positive(int), default=25,
        help="DDP gradient bucket size in MB; smaller buckets start all-reducing earlier in backward "
             "(default: %(default)s)")
    add("--dist-timeout", type=_positive(int), default=300,
        help="seconds any collective may wait for a peer before failing (default: %(default)s)")
    add("--distributed-eval", action="store_true",
        help="every rank scores its share of dev and test and the predictions are gathered "
             "(default: rank 0 scores them alone)")
    add("--resume", action="store_true",
        help="continue from OUTPUT_DIR/checkpoints/last.pt (automatic after a torchrun restart)")
    add("--quiet", action="store_true", help="no progress bar; warnings and the final line only")
    return parser


def run_main(main, parser, cleanup=None):
    """Call main(args); report our own errors as one `error:` line, exit 2.

    `cleanup` runs on every way out (the DDP script destroys its process
    group there, errors included).
    """
    args = parser.parse_args()
    try:
        main(args)
    except PartorchError as exc:
        _fail(str(exc))
    except (torch.distributed.DistError, RuntimeError) as exc:
        if not _is_peer_failure(exc):
            raise
        _fail("lost contact with another process: it crashed, was killed, or did not answer within "
              f"--dist-timeout ({str(exc).strip().splitlines()[0][:300]})")
    finally:
        if cleanup:
            cleanup()


def _is_peer_failure(exc):
    # gloo reports a dead or silent peer as a plain RuntimeError
    return isinstance(exc, torch.distributed.DistError) or bool(
        re.search(r"gloo|nccl|connection (closed|reset)|timed out", str(exc), re.IGNORECASE))


# Bad input fails every rank at the same point; torchrun stops the others as
# soon as one exits, so each waits a moment for its peers to say so too.
PEER_GRACE_SECONDS = 2.0


def _fail(message):
    sys.stderr.write(f"error: {message}\n")  # one write, so ranks do not interleave
    sys.stderr.flush()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        time.sleep(PEER_GRACE_SECONDS)
    sys.exit(2)


def setup_logging(quiet=False, rank=None):
    """Console: rank 0 shows progress, every rank shows warnings, each line
    tagged with its rank (torchrun's RANK unless given). Per-rank files are
    added by `prepare_output_dir`."""
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(f"[rank{rank}] %(message)s"))
    console.setLevel(logging.WARNING if quiet or rank != 0 else logging.INFO)
    log.handlers[:] = [console]
    log.setLevel(logging.INFO)
    log.propagate = False


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@dataclass
class PreparedData:
    table: MoleculeTable
    splits: Splits
    tokenizer: object


def prepare_data(args):
    """CSV -> validated molecules -> split -> tokenizer built on the whole set.

    No collective here: every rank does it identically, so bad input stops
    all ranks alike and none is left waiting for another.
    """
    table = read_smiles_csv(args.dataset, args.smiles_column, args.label_column, strict=args.strict)
    if args.validate_smiles or args.split == "scaffold":  # a scaffold needs a parsed molecule
        table = drop_rows(table, invalid_smiles_rows(table), "have SMILES that RDKit cannot parse")
    for warning in table.warnings:
        log.warning("warning: %s", warning)
    vocabulary_strings = table.smiles
    if args.augment or args.tta:  # random SMILES must not meet unknown tokens
        vocabulary_strings = table.smiles + augmentation_vocabulary_strings(table.smiles)
    tokenizer = build_tokenizer(args.tokenizer, vocabulary_strings)
    bad_rows = [row for s, row in zip(table.smiles, table.rows) if not tokenizer.can_encode(s)]
    if bad_rows:
        raise DataError(f"{args.dataset}: the {args.tokenizer} tokenizer cannot encode the SMILES "
                        f"at rows {', '.join(map(str, bad_rows[:5]))}")
    try:
        splits = split_indices(table.labels, args.seed, args.split, table.smiles)
    except DataError as exc:
        raise DataError(f"{args.dataset}: {exc}") from None
    log.info("data: %d molecules, train %d, dev %d, test %d, vocabulary %d",
             len(table.smiles), len(splits.train), len(splits.dev), len(splits.test), tokenizer.vocab_size)
    return PreparedData(table, splits, tokenizer)


def verify_same_data_on_all_ranks(data):
    """Stop every rank if any rank has another split or vocabulary (a stale
    copy of the file on one node would otherwise train without a word)."""
    assert_same_on_all_ranks({
        "split": _digest([data.splits.train.tolist(), data.splits.dev.tolist(), data.splits.test.tolist()]),
        "vocabulary": _digest(data.tokenizer.to_dict())})


def prepare_output_dir(path, rank=0, local_rank=0):
    """Create the output folder once, then start this rank's log file in it.

    Rank 0 creates the folder and proves it writable; local rank 0 on every
    node creates `logs/` (a no-op on a shared file system, needed on a
    node-local one). Every rank learns about any failure in one collective,
    so none is left waiting for a rank that already gave up.
    """
    path = Path(path)
    check_on_all_ranks(lambda: ensure_writable_dir(path) if rank == 0 else None)
    check_on_all_ranks(lambda: ensure_writable_dir(path / "logs") if local_rank == 0 else None)
    handler = logging.FileHandler(path / "logs" / f"rank{rank}.log", mode="a")
    handler.setFormatter(logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s"))
    handler.setLevel(logging.INFO)
    log.addHandler(handler)
    if local_rank == 0:
        log.info("output folder %s ready on this node", path)


def model_hparams(args):
    return dict(embedding_dim=args.embedding_dim, d_model=args.d_model, num_layers=args.num_layers,
                bidirectional=args.bidirectional, dropout=args.dropout)


def run_hparams(args):
    return {"model": model_hparams(args), "lr": args.lr, "weight_decay": args.weight_decay,
            "batch_size": args.batch_size, "seed": args.seed, "tokenizer": args.tokenizer, "split": args.split,
            "augment": args.augment, "tta": args.tta}


def prepare_checkpointing(args, tokenizer, device):
    """Keyword arguments for `train`: where to snapshot, and the snapshot to
    resume from (with --resume, or when torchrun restarted the workers)."""
    path = Path(args.output_dir) / "checkpoints" / "last.pt"
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    resume_from = None
    if args.resume and not path.exists():
        raise CheckpointError(f"--resume: there is no snapshot at {path}")
    if (args.resume or restarted) and path.exists():
        resume_from = load_state(path, device)
        if resume_from.get("tokenizer") != tokenizer.to_dict():
            raise CheckpointError(f"{path} was trained with another vocabulary than {args.dataset} gives")
    return dict(snapshot_path=path, resume_from=resume_from,
                snapshot_extra={"hparams": run_hparams(args), "tokenizer": tokenizer.to_dict()})


def finish_run(*, args, result, test, tokenizer, writer, world_size, started):
    """Write TensorBoard's test scalars and hparams, metrics.json and the model."""
    hparams = run_hparams(args)
    output = Path(args.output_dir)
    save_model_dir(output, result.best_state, tokenizer, hparams)
    metrics = dict(test_roc_auc=test.roc_auc, test_loss=test.loss, best_dev_roc_auc=result.best_dev_roc_auc,
                   best_epoch=result.best_epoch, epochs_completed=result.epochs_completed,
                   world_size=world_size, global_batch_size=args.batch_size,
                   per_rank_batch_size=args.batch_size // world_size,
                   train_samples_per_second=result.train_samples_per_second,
                   wall_seconds=time.perf_counter() - started, seed=args.seed, history=result.history)
    atomic_write_json(metrics, output / "metrics.json")
    writer.add_scalar("Loss/test_at_best_epoch", test.loss, result.best_epoch)
    writer.add_scalar("ROC_AUC/test_at_best_epoch", test.roc_auc, result.best_epoch)
    writer.add_pr_curve("PR/test", test.labels, test.probabilities, result.best_epoch)
    roc = roc_figure(test.labels, test.probabilities, f"Test ROC curve (AUC {test.roc_auc:.3f})")
    roc.savefig(output / "roc_curve.png", dpi=110)
    writer.add_figure("ROC/test", roc, result.best_epoch)  # also closes the figure
    save_figure(training_curves_figure(result.history, result.best_epoch), output / "training_curves.png")
    flat = {**hparams.pop("model"), **hparams, "world_size": world_size}
    writer.add_hparams(flat, {"hparam/test_roc_auc": test.roc_auc, "hparam/best_dev_roc_auc": result.best_dev_roc_auc},
                       run_name="hparams")
    writer.close()
    log.info("metrics: %s", json.dumps({k: v for k, v in metrics.items() if k != "history"}))
    print(f"Final test ROC AUC: {test.roc_auc:.4f}", flush=True)
    return metrics
