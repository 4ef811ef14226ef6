"""The baseline a chemist would try first: a random forest on Morgan
fingerprints, with the same molecules, labels, splits and seeds as the
network (the same flags mean the same thing here).

    python benchmarks/baseline_fingerprints.py dataset/BBBP.csv
    python benchmarks/baseline_fingerprints.py dataset/BBBP.csv \\
        --split scaffold --split-sizes 0.8,0.1,0.1
    python benchmarks/baseline_fingerprints.py dataset/ESOL.csv \\
        --label-column "measured log solubility in mols per litre"

Each label column gets its own forest (a classifier for 0/1 labels, a
regressor otherwise), fitted on the training molecules that have that label.
Prints `Final test ROC AUC: 0.xxxx` (or RMSE) like the training scripts, so
the two compare line for line; with --output-dir it also writes metrics.json
and splits.json as a training run does.
"""

import argparse
from pathlib import Path
import sys
import time

import numpy as np
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

from partorch import read_molecule_csv, run_main
from partorch.ddp.checkpoint import ensure_writable_dir
from partorch.ddp.files import atomic_write_json
from partorch.molecules.chem import morgan_fingerprints
from partorch.molecules.flags import add_split_flags
from partorch.molecules.splits import describe_split, split_molecules
from partorch.molecules.tasks import build_task, choose_task_kind


def forest_predictions(features, labels, train, kind, args):
    """One label column: a forest fitted on the training molecules labelled in
    it, and its predictions for every molecule (probabilities of class 1, or values)."""
    train = train[~np.isnan(labels[train])]
    if not len(train):  # no labelled training molecule in this column: nothing to predict from
        return np.full(len(labels), np.nan)
    if kind == "regression":
        forest = RandomForestRegressor(
            n_estimators=args.trees, random_state=args.seed, n_jobs=args.jobs
        )
        return forest.fit(features[train], labels[train]).predict(features)
    classes = labels[train].astype(int)
    if len(np.unique(classes)) < 2:  # nothing to learn: every molecule gets the one class seen
        return np.full(len(labels), float(classes[0]))
    forest = RandomForestClassifier(
        n_estimators=args.trees, random_state=args.seed, n_jobs=args.jobs
    )
    return forest.fit(features[train], classes).predict_proba(features)[:, 1]


def forest(table, splits, kind, args):
    """Each label column's forest's predictions for every molecule [molecules, columns]."""
    features = morgan_fingerprints(table.smiles, args.radius, args.bits)  # zeros: unparsable
    columns = range(len(table.label_columns))
    return np.stack(
        [
            forest_predictions(features, table.labels[:, j], splits.train, kind, args)
            for j in columns
        ],
        axis=1,
    )


def run_baseline(args, predict, model):
    """Read and split the data as the training scripts do, get `predict(table, splits, kind,
    args)`'s predictions [molecules, columns] (probabilities of class 1, or values), score dev
    and test, and with --output-dir write metrics.json and splits.json as a training run does.
    `model` describes the model in metrics.json."""
    started = time.perf_counter()
    # as the training scripts do: a scaffold needs a parsed molecule, and the canonical form parses
    # them all
    table = read_molecule_csv(
        args.dataset,
        args.smiles_column,
        args.label_column,
        strict=args.strict,
        smiles_form=args.smiles_form,
        parse="scaffold" in args.split,
    )
    for warning in table.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.output_dir:
        ensure_writable_dir(Path(args.output_dir))  # before minutes of fitting, not after
    kind = choose_task_kind(args.task, table)
    splits = split_molecules(table, args.split, args.seed, kind, args.split_sizes)
    task = build_task(kind, table, splits)
    outputs = task.outputs_for(predict(table, splits, kind, args))
    scores = {
        name: task.metrics(table.labels[idx], outputs[idx])
        for name, idx in (("dev", splits.dev), ("test", splits.test))
    }
    if args.output_dir:
        output, score = Path(args.output_dir), task.score_name
        atomic_write_json(
            describe_split(table, splits, args.split, args.seed, args.split_sizes),
            output / "splits.json",
        )
        # metrics.json last, whole or not at all: the accuracy report takes it for "this run is
        # done"
        atomic_write_json(
            {
                f"test_{score}": scores["test"][score],
                f"dev_{score}": scores["dev"][score],
                "task": kind,
                "label_columns": task.columns,
                "test_metrics": scores["test"],
                "seed": args.seed,
                "split": args.split,
                "wall_seconds": time.perf_counter() - started,
                "model": model,
            },
            output / "metrics.json",
        )
    print(task.final_line(scores["test"]))


def main(args):
    model = f"random forest, {args.trees} trees, Morgan r={args.radius}, {args.bits} bits"
    run_baseline(args, forest, model)


def baseline_parser(doc, seeds_what):
    """The flags every baseline shares with the training scripts (data, split, seed), and
    --output-dir."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_split_flags(parser)
    parser.add_argument(
        "--random-seed",
        "--seed",
        dest="seed",
        type=int,
        default=1729,
        help=f"seed of the split and {seeds_what} (default: %(default)s)",
    )
    parser.add_argument("--output-dir", help="also write metrics.json and splits.json here")
    return parser


if __name__ == "__main__":
    parser = baseline_parser(__doc__, "the forest")
    parser.add_argument("--trees", type=int, default=500, help="(default: %(default)s)")
    parser.add_argument(
        "--radius", type=int, default=2, help="Morgan radius (default: %(default)s)"
    )
    parser.add_argument(
        "--bits", type=int, default=2048, help="fingerprint length (default: %(default)s)"
    )
    parser.add_argument(
        "--jobs", type=int, default=-1, help="parallel trees, -1 = all cores (default: %(default)s)"
    )
    run_main(main, parser)
