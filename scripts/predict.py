"""Predict with a trained model: writes `smiles,probability` as CSV.

    python scripts/predict.py runs/ddp dataset/BBBP.csv > predictions.csv
    echo 'CCO' | python scripts/predict.py runs/ddp -
    python scripts/predict.py runs/ddp molecules.csv --smiles-column SMILES --output out.csv

MODEL_DIR is a training run's --output-dir (best_model.pt, tokenizer.json,
hparams.json). A row that is empty or holds tokens outside the training
vocabulary is reported on stderr with its row number and gets an empty
probability; the others are still predicted.
"""
import argparse
import csv
import sys

import pandas as pd
import torch

from partorch import PartorchError, load_model_dir, predict_smiles, run_main


def read_smiles(source, column):
    if source == "-":
        return [line.strip() for line in sys.stdin], "line", 1
    try:
        frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise PartorchError(f"{source}: cannot read as CSV ({str(exc).splitlines()[0]})") from None
    if column not in frame.columns:
        raise PartorchError(f"{source}: no column {column!r}; the columns are {list(frame.columns)}")
    return frame[column].str.strip().tolist(), "row", 2  # row numbers as an editor shows them


def main(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, tokenizer, _ = load_model_dir(args.model_dir, device)
    smiles, unit, first = read_smiles(args.input, args.smiles_column)
    probabilities, failures = predict_smiles(model, tokenizer, smiles, device, args.batch_size)
    for position, message in failures:
        print(f"warning: {args.input} {unit} {position + first}: {message}; not predicted", file=sys.stderr)
    out = open(args.output, "w", newline="") if args.output else sys.stdout
    writer = csv.writer(out)
    writer.writerow(["smiles", "probability"])
    for s, p in zip(smiles, probabilities):
        writer.writerow([s, "" if p != p else f"{p:.6f}"])
    if args.output:
        out.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a training run's output folder")
    parser.add_argument("input", help="CSV file with a SMILES column, or - for one SMILES a line on stdin")
    parser.add_argument("--smiles-column", default="smiles", help="(default: %(default)s)")
    parser.add_argument("--output", help="write here instead of stdout")
    parser.add_argument("--batch-size", type=int, default=256, help="(default: %(default)s)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    run_main(main, parser)
