"""Predict with a trained model: writes CSV with the SMILES and one column per task.

    python scripts/predict.py runs/ddp/version_0 dataset/BBBP.csv > predictions.csv
    echo 'CCO' | python scripts/predict.py runs/ddp/version_0 -
    python scripts/predict.py runs/ddp/version_0 molecules.csv \
        --smiles-column SMILES --output out.csv
    # an ensemble: the mean
    python scripts/predict.py runs/seed_1 runs/seed_2 runs/seed_3 molecules.csv

MODEL_DIR is a training run's --output-dir (best_model.pt, hparams.json,
task.json, tokenizer.json). Each task's column is named after the label
column it was trained on: the probability of class 1 for classification,
the predicted value in the label's units for regression. Several MODEL_DIRs
trained for the same tasks (one run per seed, say) give the mean of their
predictions. Molecules are written as each model was trained on them
(canonical SMILES unless it was trained with --smiles-form raw). A row that
is empty, that RDKit cannot parse, or that holds tokens outside a model's
vocabulary is reported on stderr with its row number and left empty; the
others are still predicted.
"""

import argparse
import csv
import sys

import numpy as np
import pandas as pd
import torch

from partorch import PartorchError, RNNPredictor, load_model_dir, predict_smiles, run_main
from partorch.molecules.tasks import task_from_dict
from partorch.molecules.tokenizer import tokenizer_from_dict


def build_model(descriptions):
    """The model a training script's build_model made, from its saved arguments."""
    if "hparams" not in descriptions or "model" not in descriptions["hparams"]:
        raise PartorchError(
            "not a training run's output folder: hparams.json with the model's arguments is missing"
        )
    return RNNPredictor(**descriptions["hparams"]["model"])


def read_smiles(source, column):
    if source == "-":
        return [line.strip() for line in sys.stdin], "line", 1
    try:
        frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise PartorchError(f"{source}: cannot read as CSV ({str(exc).splitlines()[0]})") from None
    if column not in frame.columns:
        raise PartorchError(
            f"{source}: no column {column!r}; the columns are {list(frame.columns)}"
        )
    return frame[column].str.strip().tolist(), "row", 2  # row numbers as an editor shows them


def predict_with(model_dir, smiles, device, batch_size):
    """(task, predictions, failures) of one trained model for `smiles`."""
    model, descriptions = load_model_dir(model_dir, build_model, device)
    task, tokenizer = (
        task_from_dict(descriptions["task"]),
        tokenizer_from_dict(descriptions["tokenizer"]),
    )
    # the form the model was trained on; a model from before canonical SMILES read raw strings
    form = descriptions["hparams"].get("smiles_form", "raw")
    outputs, failures = predict_smiles(
        model, tokenizer, smiles, device, batch_size, smiles_form=form
    )
    return task, task.predictions(outputs), failures


def main(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    smiles, unit, first = read_smiles(args.input, args.smiles_column)
    tasks, predictions, failed = [], [], {}
    for model_dir in args.model_dir:
        task, predicted, failures = predict_with(model_dir, smiles, device, args.batch_size)
        if tasks and (task.kind, task.columns) != (tasks[0].kind, tasks[0].columns):
            raise PartorchError(
                f"{model_dir} predicts {task.kind} of {task.columns}, {args.model_dir[0]} "
                f"{tasks[0].kind} of {tasks[0].columns}: an ensemble needs the same tasks"
            )
        tasks.append(task)
        predictions.append(predicted)
        for position, message in failures:
            failed.setdefault(position, message)
    for position, message in sorted(failed.items()):
        print(
            f"warning: {args.input} {unit} {position + first}: {message}; not predicted",
            file=sys.stderr,
        )
    mean = np.mean(predictions, axis=0)  # NaN, an empty cell, where any model could not predict
    out = open(args.output, "w", newline="") if args.output else sys.stdout
    writer = csv.writer(out)
    writer.writerow([args.smiles_column, *tasks[0].columns])
    for s, row in zip(smiles, mean):
        writer.writerow(
            [s, *("" if p != p else f"{p:.10g}" for p in row)]
        )  # ROC AUC needs no ties made here
    if args.output:
        out.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "model_dir",
        nargs="+",
        help="a training run's output folder; several average their predictions",
    )
    parser.add_argument(
        "input", help="CSV file with a SMILES column, or - for one SMILES a line on stdin"
    )
    parser.add_argument("--smiles-column", default="smiles", help="(default: %(default)s)")
    parser.add_argument("--output", help="write here instead of stdout")
    parser.add_argument("--batch-size", type=int, default=256, help="(default: %(default)s)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    run_main(main, parser)
