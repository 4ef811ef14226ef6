"""Predict with trained models: writes the SMILES and one column per task, CSV or Parquet.

    python scripts/predict.py runs/ddp/version_0 dataset/BBBP.csv > predictions.csv
    echo 'CCO' | python scripts/predict.py runs/ddp/version_0 -
    python scripts/predict.py runs/ddp/version_0 molecules.csv \\
        --smiles-column SMILES --output out.csv
    # an ensemble: each column's mean over the models, and beside it its _std
    python scripts/predict.py runs/seed_1 runs/seed_2 runs/seed_3 molecules.csv \\
        --output out.parquet

MODEL_DIR is a training run's --output-dir (best_model.pt, hparams.json,
task.json, tokenizer.json, and extra_features.json for a model trained with
--extra-features: those features are computed here the same way). Each task's
column is named after the label column it was trained on: the probability of
class 1 for classification, the predicted value in the label's units for
regression. Several MODEL_DIRs trained for the same tasks (one run per seed,
say) give the mean of their predictions in that column and, right after it, the
column NAME_std: the standard deviation over the models (population, ddof=0),
high where the models disagree. Molecules are written as each model was trained
on them (canonical SMILES unless it was trained with --smiles-form raw). A row
that is empty, that RDKit cannot parse, or that holds tokens outside a model's
vocabulary is reported on stderr with its row number and left empty (in every
column, when any model could not read it); the others are still predicted.
--output writes Parquet when its name ends in .parquet, CSV otherwise. On a
terminal, a progress bar on stderr counts the molecules.
"""

import argparse
import csv
import io
import os
from pathlib import Path
import sys

import numpy as np
import pandas as pd
import torch

from partorch import (
    FlagParser,
    PartorchError,
    RNNPredictor,
    load_model_dir,
    predict_smiles,
    run_main,
)
from partorch.ddp.files import atomic_write, atomic_write_text
from partorch.molecules.features import features_from_dict
from partorch.molecules.table import read_frame
from partorch.molecules.tasks import task_from_dict
from partorch.molecules.tokenizer import tokenizer_from_dict


def build_model(descriptions):
    """The model a training script's build_model made, from its saved arguments."""
    missing = [f"{n}.json" for n in ("hparams", "task", "tokenizer") if n not in descriptions]
    if missing or "model" not in descriptions["hparams"]:
        raise PartorchError(
            f"not a training run's folder ({', '.join(missing or ['hparams.json'])} missing: the "
            "model's arguments, its task and its vocabulary are all needed)"
        )
    try:
        return RNNPredictor(**descriptions["hparams"]["model"])
    except TypeError:  # arguments of another constructor: the fingerprint example's, say
        raise PartorchError(
            "its model is not the SMILES network this script rebuilds (hparams.json's model "
            f"arguments are {sorted(descriptions['hparams']['model'])})"
        ) from None


def read_smiles(source, column):
    if source == "-":
        return [line.strip() for line in sys.stdin], "line", 1
    frame = read_frame(source)  # the training reader: a trailing comma shifts no column
    if column not in frame.columns:
        raise PartorchError(
            f"{source}: no column {column!r}; the columns are {list(frame.columns)}"
        )
    return frame[column].fillna("").str.strip().tolist(), "row", 2  # rows as an editor shows them


def check_output(path):
    """Before any work: the predictions must have a file to go to."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise PartorchError(f"--output {path}: is a folder; name a file to write")
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise PartorchError(f"--output {path}: cannot write in {path.parent}")


def load_model(model_dir, device):
    """(model, task, tokenizer, SMILES form, features or None) of one training run's folder."""
    model, descriptions = load_model_dir(model_dir, build_model, device)
    task, tokenizer = (
        task_from_dict(descriptions["task"]),
        tokenizer_from_dict(descriptions["tokenizer"]),
    )
    features = features_from_dict(descriptions.get("extra_features"))
    if getattr(model, "extra_features", 0) != (len(features) if features else 0):
        raise PartorchError(
            f"{model_dir}: its model reads {model.extra_features} extra features, its "
            f"extra_features.json describes {len(features) if features else 'none'}"
        )
    # the form the model was trained on; a model from before canonical SMILES read raw strings
    return model, task, tokenizer, descriptions["hparams"].get("smiles_form", "raw"), features


def load_models(model_dirs, device):
    """Every model, checked to predict the same tasks, before any SMILES is read."""
    models = [load_model(model_dir, device) for model_dir in model_dirs]
    first = models[0][1]
    for model_dir, (_, task, *_) in zip(model_dirs, models):
        if (task.kind, task.output_columns) != (first.kind, first.output_columns):
            raise PartorchError(
                f"{model_dir} predicts {task.kind} of {task.output_columns}, {model_dirs[0]} "
                f"{first.kind} of {first.output_columns}: an ensemble needs the same tasks"
            )
    return models


def summarise(predictions, names):
    """(column names, values [molecules, columns]) of each model's predictions
    [molecules, len(names)]: one model's as they are; several give each column's
    mean and, after it, `_std`, their population standard deviation (ddof=0)."""
    stacked = np.stack(predictions)
    if len(predictions) == 1:
        return list(names), stacked[0]
    # NaN in both, an empty cell, where any model could not predict
    mean, std = stacked.mean(axis=0), stacked.std(axis=0)
    columns = [n for name in names for n in (name, f"{name}_std")]
    return columns, np.stack([mean, std], axis=2).reshape(len(mean), -1)


def as_csv(column, smiles, names, values):
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow([column, *names])
    for s, row in zip(smiles, values):  # ROC AUC needs no ties made here: 10 digits
        writer.writerow([s, *("" if p != p else f"{p:.10g}" for p in row)])
    return text.getvalue()


def write_output(path, column, smiles, names, values):
    """Whole or not at all: an earlier file of that name survives a failure."""
    if not str(path).endswith(".parquet"):
        atomic_write_text(as_csv(column, smiles, names, values), path)
        return
    frame = pd.DataFrame(values, columns=names)
    frame.insert(0, column, smiles, allow_duplicates=True)
    atomic_write(path, lambda f: frame.to_parquet(f, index=False))


def predict_all(models, smiles, device, batch_size):
    """(each model's predictions, {position: the first model's failure message})."""
    predictions, failed = [], {}
    for k, (model, task, tokenizer, form, features) in enumerate(models, 1):
        outputs, failures = predict_smiles(
            model,
            tokenizer,
            smiles,
            device,
            batch_size,
            smiles_form=form,
            progress=f"model {k}/{len(models)}" if len(models) > 1 else True,
            features=features,
        )
        predictions.append(task.predictions(outputs))
        for position, message in failures:
            failed.setdefault(position, message)
    return predictions, failed


def main(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    check_output(args.output)
    models = load_models(args.model_dir, device)
    smiles, unit, first = read_smiles(args.input, args.smiles_column)
    predictions, failed = predict_all(models, smiles, device, args.batch_size)
    for position, message in sorted(failed.items()):
        print(
            f"warning: {args.input} {unit} {position + first}: {message}; not predicted",
            file=sys.stderr,
        )
    names, values = summarise(predictions, models[0][1].output_columns)
    if args.output:
        write_output(args.output, args.smiles_column, smiles, names, values)
    else:
        sys.stdout.write(as_csv(args.smiles_column, smiles, names, values))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "model_dir",
        nargs="+",
        help="a training run's output folder; several give each column's mean and its _std",
    )
    parser.add_argument(
        "input", help="CSV file with a SMILES column, or - for one SMILES a line on stdin"
    )
    parser.add_argument("--smiles-column", default="smiles", help="(default: %(default)s)")
    parser.add_argument(
        "--output",
        help="write here instead of stdout: Parquet if the name ends in .parquet, else CSV",
    )
    parser.add_argument(
        "--batch-size", type=FlagParser.positive(int), default=256, help="(default: %(default)s)"
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    run_main(main, parser)
