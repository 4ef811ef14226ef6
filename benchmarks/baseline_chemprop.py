"""The field's own peer: chemprop's D-MPNN (v2) at its defaults, on the same molecules, labels,
splits and seeds as the network and the forest (the same flags mean the same thing here).

    python benchmarks/baseline_chemprop.py dataset/BBBP.csv --split scaffold \\
        --split-sizes 0.8,0.1,0.1 --seed 1 --chemprop ~/chemprop-env/bin/chemprop

chemprop runs as a command of its own (--chemprop; default: `chemprop` on the PATH): it pins
its own RDKit and Lightning, so install it in an environment of its own (`pip install
chemprop==2.3.1`; the `bench` extra does not, for that reason). The molecules are the table the
training scripts read (canonical SMILES by default; rows RDKit cannot parse dropped), the split
is theirs for the seed, given to chemprop as its --splits-file: it trains on train, stops early
on dev (its "val"), and predicts every molecule. The scores are partorch's, from those
predictions: `Final test ROC AUC: 0.xxxx` (or RMSE), and with --output-dir metrics.json and
splits.json as a training run writes them.
"""

import json
from pathlib import Path
import shlex
import shutil
import subprocess
import tempfile

from baseline_fingerprints import baseline_parser, run_baseline
import numpy as np
import pandas as pd

from partorch import PartorchError, run_main

SMILES = "smiles"


def chemprop(table, splits, kind, args):
    """chemprop's predictions for every molecule [molecules, columns], trained in a scratch
    folder (kept under --output-dir as chemprop/, for its logs)."""
    keep = Path(args.output_dir) / "chemprop" if args.output_dir else None
    with tempfile.TemporaryDirectory() as scratch:
        folder = keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        data = folder / "data.csv"
        _molecules(table).to_csv(data, index=False)
        split = {"train": splits.train, "val": splits.dev, "test": splits.test}
        (folder / "splits.json").write_text(
            json.dumps([{k: list(map(int, v)) for k, v in split.items()}])
        )
        _run(
            args,
            "train",
            "--data-path",
            data,
            "--task-type",
            kind,
            "--smiles-columns",
            SMILES,
            "--target-columns",
            *_targets(table),
            "--splits-file",
            folder / "splits.json",
            "--data-seed",
            args.seed,
            "--pytorch-seed",
            args.seed,
            "--accelerator",
            "cpu",
            "--num-workers",
            0,
            "--output-dir",
            folder / "model",
            *shlex.split(args.chemprop_args),
        )
        models = sorted((folder / "model").rglob("best*.pt"))
        if len(models) != 1:
            raise PartorchError(f"chemprop left {len(models)} best models in {folder / 'model'}")
        pd.DataFrame({SMILES: table.smiles}).to_csv(folder / "molecules.csv", index=False)
        _run(
            args,
            "predict",
            "--test-path",
            folder / "molecules.csv",
            "--smiles-columns",
            SMILES,
            "--model-paths",
            models[0],
            "--preds-path",
            folder / "predictions.csv",
        )
        predicted = pd.read_csv(folder / "predictions.csv")
    if len(predicted) != len(table.smiles):
        raise PartorchError(f"chemprop predicted {len(predicted)} of {len(table.smiles)} molecules")
    return predicted[_targets(table)].to_numpy(np.float64)


def _molecules(table):
    """The table as chemprop reads it: SMILES, then a column a task named target_j (the
    original names may hold commas, which chemprop's column flags would split)."""
    frame = pd.DataFrame(table.labels, columns=_targets(table))
    frame.insert(0, SMILES, table.smiles)
    return frame


def _targets(table):
    return [f"target_{j}" for j in range(len(table.label_columns))]


def _run(args, command, *flags):
    line = [args.chemprop, command, *map(str, flags)]
    done = subprocess.run(line, capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip() or done.stdout.strip() or "?").splitlines()[-1]
        raise PartorchError(f"chemprop {command} failed (exit status {done.returncode}): {last}")


def main(args):
    if shutil.which(args.chemprop) is None:
        raise PartorchError(
            f"--chemprop {args.chemprop}: no such command; install chemprop==2.3.1 in an "
            "environment of its own and name its bin/chemprop"
        )
    run_baseline(args, chemprop, "chemprop 2 D-MPNN, its defaults")


if __name__ == "__main__":
    parser = baseline_parser(__doc__, "chemprop's training")
    parser.add_argument(
        "--chemprop", default="chemprop", help="chemprop's command (default: %(default)s)"
    )
    parser.add_argument(
        "--chemprop-args",
        default="",
        help="more flags for `chemprop train`, as one string (default: none: its defaults)",
    )
    run_main(main, parser)
