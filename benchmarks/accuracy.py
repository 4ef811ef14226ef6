"""Regenerate docs/accuracy.md: the network against a random forest on Morgan
fingerprints, on identical splits, over seeds, for each data set and split.

    # BBBP: 3 splits x 5 seeds x 2 models, and 4 runs of the raw-SMILES lesson (the report
    # gives the minutes a network run took)
    python benchmarks/accuracy.py
    python benchmarks/accuracy.py --datasets BBBP HIV SIDER ESOL Lipophilicity
    python benchmarks/accuracy.py --list          # the runs, and which are done
    python benchmarks/accuracy.py --write-only    # the tables from the runs done so far
    # a heavier network recipe, too
    python benchmarks/accuracy.py --recipes augment-long --only scaffold_0.8

Every run writes its own folder under --runs (runs/accuracy/DATASET/SPLIT_SIZES/
MODEL_FORM[_RECIPE]/seed_N); what it scored is copied into the ledger,
docs/accuracy_runs.json, which is committed: the tables are written from the
ledger alone, so they survive the run folders (another machine, a cleaned
disk). So do ensembles: a run whose split leaves the same dev and test molecules
for every seed also keeps its best model's predictions of them, in
docs/accuracy_runs_predictions/ beside the ledger, and the mean of those of the
seeds is the ensemble's, scored once every seed is done, whichever machine ran
which seed. A run in the ledger is not run again (delete its entry to redo it); a
network run cut short continues from its snapshot (--resume), so the command
picks up where it stopped. Data sets other than BBBP must be placed first
(python dataset/place_data.py NAME); one that is not placed is listed as such.
The report ends with each recipe's dev gain over the defaults, split by split:
the figures a default is chosen by (never test's), each beside its cost in minutes.
"""

import argparse
from dataclasses import asdict, dataclass
import gzip
import hashlib
import importlib.util
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile
from typing import NamedTuple

import numpy as np
import pandas as pd

from partorch import PartorchError, read_molecule_csv
from partorch.molecules.splits import (
    describe_split,
    parse_sizes,
    repeats_across_parts,
    split_molecules,
)
from partorch.molecules.tasks import choose_task_kind, task_from_dict

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (1729, 1, 2, 3, 4)
TUTORIAL_SIZES = "0.72,0.18,0.1"  # the training scripts' default
PAPER_SIZES = "0.8,0.1,0.1"  # MoleculeNet's and chemprop's
# data set -> its splits (name, sizes), and whether its labels are regression targets
GRID = {
    "BBBP": {
        "splits": [
            ("stratified", TUTORIAL_SIZES),
            ("scaffold", PAPER_SIZES),
            ("scaffold_balanced", PAPER_SIZES),
        ]
    },
    "HIV": {"splits": [("stratified", TUTORIAL_SIZES), ("scaffold", PAPER_SIZES)]},
    "SIDER": {"splits": [("random", PAPER_SIZES)]},
    "ESOL": {"splits": [("random", PAPER_SIZES)], "regression": True},
    "Lipophilicity": {"splits": [("random", PAPER_SIZES)], "regression": True},
}
SEED_INDEPENDENT_SPLITS = {
    "scaffold"
}  # where every seed trains, tunes and tests on the same molecules
# The lesson of issue 15: the raw strings' writing style predicts BBBP's label. Measured on the
# large network, the defaults then.
STYLE_RECIPE = "large"
STYLE_LESSON = [
    ("BBBP", split, TUTORIAL_SIZES, form)
    for split in ("scaffold", "stratified")
    for form in ("raw", "canonical")
]
# Network recipes beyond the defaults, run with --recipes NAME: levers measured, not guessed.
# The defaults were the large network (1.1 M weights) until its dev scores proved no better than
# the small one's, which takes a third to a ninth of the time (the section "Choosing the
# defaults"); the recipes measured on it keep its sizes and say so by name.
LARGE = ["--d-model", "128", "--num-layers", "3"]
RECIPES = {
    "large": LARGE,
    # a fresh random SMILES per molecule per epoch; 11 strings scored
    "large-augment": [*LARGE, "--augment", "--tta", "10"],
    # for runs whose best dev epoch is the 30th, the last
    "large-long": [*LARGE, "--epochs", "100", "--patience", "20"],
    # rare positives (HIV's 3.5 %) carry half the loss
    "large-weighted": [*LARGE, "--class-weight", "balanced"],
    # augmentation as a regulariser alone, without --tta's cost of scoring 11 strings a molecule
    # (HIV's dev is 4,000 molecules)
    "large-augment-train": [*LARGE, "--augment"],
    # large-augment-train's best dev epoch is mostly the 25th-30th: fresh strings every epoch
    # fit more slowly
    "large-augment-long": [*LARGE, "--augment", "--epochs", "100", "--patience", "20"],
    "wide": ["--d-model", "256", "--num-layers", "3"],  # 4.1 M weights
    # the two levers that gained dev on the small sets, together
    "augment-long": ["--augment", "--epochs", "100", "--patience", "20"],
    # issue 41: the shipped encoder (pretrained on MOSES to regress RDKit descriptors),
    # fine-tuned whole from the first step, or with the encoder frozen for 5 epochs first
    "pretrained": ["--init-from", "models/moses_descriptors"],
    "pretrained-frozen": [
        "--init-from",
        "models/moses_descriptors",
        "--freeze-pretrained-epochs",
        "5",
    ],
    "pretrained-augment-long": [
        "--init-from",
        "models/moses_descriptors",
        "--augment",
        "--epochs",
        "100",
        "--patience",
        "20",
    ],
    # what chemists add: computed descriptors beside the encoding, alone and with the encoder
    "large-features": [*LARGE, "--extra-features", "rdkit2d"],
    "pretrained-features": [
        "--init-from",
        "models/moses_descriptors",
        "--extra-features",
        "rdkit2d",
    ],
    # the levers that raised dev, together
    "pretrained-features-augment-long": [
        "--init-from",
        "models/moses_descriptors",
        "--extra-features",
        "rdkit2d",
        "--augment",
        "--epochs",
        "100",
        "--patience",
        "20",
    ],
}


def _with_features(recipe, kind):
    """`recipe`'s flags with `--extra-features kind` in place of its rdkit2d."""
    return [kind if flag == "rdkit2d" else flag for flag in RECIPES[recipe]]


def _variant(recipe, *flags):
    """`recipe`'s flags followed by `flags`: a recipe screened against the one it extends (the
    report finds that base again with preset_base)."""
    return [*RECIPES[recipe], *flags]


# the levers that raised dev, with the forest's own input (Morgan counts) for the descriptors:
# for SIDER, where the forest on Morgan bits leads
RECIPES["pretrained-morgan-augment-long"] = _with_features(
    "pretrained-features-augment-long", "morgan"
)
# both kinds of features at once: for Lipophilicity, where chemprop leads the recipes above
RECIPES["pretrained-rdkit2d-morgan-augment-long"] = _with_features(
    "pretrained-features-augment-long", "rdkit2d+morgan"
)
# the preset with each computed feature zeroed half the time in training: on HIV the preset's
# dev score peaks at epoch 2 or 3 while its training loss keeps falling (the head learns the
# training molecules by their rare Morgan environments)
RECIPES["pretrained-rdkit2d-morgan-fdrop-augment-long"] = _variant(
    "pretrained-rdkit2d-morgan-augment-long", "--feature-dropout", "0.5"
)
# the preset fine-tuned more gently, and with stronger weight decay: on HIV and Lipophilicity its
# best dev epoch comes within the first 3 to 11 of 100, the encoder and head fitting the training
# molecules long before augmentation has shown them many writings
RECIPES["pretrained-rdkit2d-morgan-cosine3e-4-augment-long"] = _variant(
    "pretrained-rdkit2d-morgan-augment-long", "--lr", "3e-4", "--lr-schedule", "cosine"
)
RECIPES["pretrained-rdkit2d-morgan-wd5e-2-augment-long"] = _variant(
    "pretrained-rdkit2d-morgan-augment-long", "--weight-decay", "0.05"
)
# the preset with every RDKit 2D descriptor (about 200, as chemprop's rdkit_2d generator) in
# place of its 15
RECIPES["pretrained-rdkit2dfull-morgan-augment-long"] = _with_features(
    "pretrained-features-augment-long", "rdkit2d-full+morgan"
)
# the preset without its Morgan counts: on HIV scaffold the forest reads the same environments
# as bits and leads on dev, while the network's head can learn the training molecules by their
# rare counts within a few epochs (its best dev epoch is the 4th to the 23rd of 100)
RECIPES["pretrained-rdkit2dfull-augment-long"] = _with_features(
    "pretrained-features-augment-long", "rdkit2d-full"
)
# the preset with one flag more, each screened on HIV scaffold, where the forest leads; recipe
# pretrained-rdkit2dfull-morgan-NAME-augment-long
PRESET_SCREENS = {
    # a head 8 times as wide: its hidden layer (the encoder's 64 units) reads the 128-wide
    # encoding and 2,265 features, where the forest splits on any of 2,048 bits
    "head512": ["--head-size", "512"],
    # a third of the learning rate: the dev score swings by up to 0.027 from one epoch to the
    # next, and the best epoch is one of those swings
    "lr3e-4": ["--lr", "3e-4"],
    # batches drawn at random instead of by length: HIV's actives are longer than most (7.3 % of
    # the longest fifth of SMILES, 2.1 % of the shortest), so a length's batches hold few or many
    "random": ["--sampler", "random"],
    # batches 4 times as large (same learning rate): a quarter of the steps, each gradient
    # averaged over 4 times the molecules, against the dev score's swing between epochs
    "batch256": ["--batch-size", "256"],
    # 500 times the weight decay (AdamW's, decoupled): about 2.5 % of each weight taken off an
    # epoch, against a head that fits the training molecules within a few epochs (level with its
    # base on BBBP scaffold, where the 15-descriptor preset was screened)
    "wd5e-2": ["--weight-decay", "0.05"],
    # the encoder fine-tuned at a tenth of the head's rate: the best dev epoch comes early and the
    # dev score swings, as if the first epochs at the full rate overwrote what pretraining learnt
    "enclr1e-1": ["--pretrained-lr-scale", "0.1"],
}
RECIPES.update(
    {
        f"pretrained-rdkit2dfull-morgan-{name}-augment-long": _variant(
            "pretrained-rdkit2dfull-morgan-augment-long", *flags
        )
        for name, flags in PRESET_SCREENS.items()
    }
)
CLASSIFICATION_RECIPES = {"large-weighted"}  # planned on classification data sets only
# The training scripts' --preset NAME is this recipe (a test keeps their flags the same): the
# recipe's rows are the preset's figures. Chosen by mean dev score, never test's.
PRESET_RECIPES = {"accurate": "pretrained-rdkit2dfull-morgan-augment-long"}
PEERS = ("chemprop",)  # other models the network is compared with, beside the forest


@dataclass(frozen=True)
class Run:
    dataset: str
    split: str
    sizes: str
    model: str  # "network", or a baseline: "forest" or "chemprop"
    form: str  # "canonical" or "raw"
    seed: int
    recipe: str = "default"  # network flags beyond the defaults: a key of RECIPES

    @property
    def key(self):
        """The run's name in the ledger, and its folder under --runs."""
        recipe = "" if self.recipe == "default" else f"_{self.recipe}"
        return (
            f"{self.dataset}/{self.split}_{self.sizes.replace(',', '-')}/"
            f"{self.model}_{self.form}{recipe}/seed_{self.seed}"
        )

    @property
    def repeats_key(self):
        """The ledger's name for what this run's split repeats across its parts (the same for
        every model and recipe on the split and seed)."""
        return f"{self.key.rsplit('/', 2)[0]}/repeats/seed_{self.seed}"

    @property
    def label(self):
        return self.model if self.recipe == "default" else f"{self.model}, {self.recipe}"

    def folder(self, runs):
        return Path(runs) / self.key

    @property
    def joins_ensembles(self):
        """Its seeds' predictions can be averaged: a network scored on the given SMILES (predict.py
        has no --tta), on a split whose dev and test molecules do not depend on the seed."""
        return (
            self.model == "network"
            and "--tta" not in RECIPES.get(self.recipe, [])
            and self.split in SEED_INDEPENDENT_SPLITS
        )

    def command(self, csv, labels, processes, chemprop="chemprop"):
        common = [
            str(csv),
            "--label-column",
            *labels,
            "--split",
            self.split,
            "--split-sizes",
            self.sizes,
            "--smiles-form",
            self.form,
            "--seed",
            str(self.seed),
        ]
        if self.model == "forest":
            return [sys.executable, str(ROOT / "benchmarks" / "baseline_fingerprints.py"), *common]
        if self.model == "chemprop":
            baseline = ROOT / "benchmarks" / "baseline_chemprop.py"
            return [sys.executable, str(baseline), *common, "--chemprop", chemprop]
        same_molecules = (
            ["--validate-smiles"] if self.form == "raw" else []
        )  # raw strings of the same 2,039
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(processes),
            str(ROOT / "scripts" / "basic_neural_network_ddp.py"),
            *common,
            *same_molecules,
            "--quiet",
            *RECIPES.get(self.recipe, []),
        ]


def plan(datasets, seeds, recipes=(), peers=()):
    """Every run of the grid: the forest, `peers` (chemprop), the network's defaults and
    `recipes`, each on every split of `datasets` for every seed; and the style lesson's."""
    models = [
        ("forest", "default"),
        *((peer, "default") for peer in peers),
        ("network", "default"),
        *(("network", recipe) for recipe in recipes),
    ]
    runs = [
        Run(name, split, sizes, model, "canonical", seed, recipe)
        for name in datasets
        for split, sizes in GRID[name]["splits"]
        for model, recipe in models
        for seed in seeds
        if not (recipe in CLASSIFICATION_RECIPES and GRID[name].get("regression"))
    ]
    if "BBBP" in datasets:
        runs += [
            Run(name, split, sizes, "network", form, seeds[0], STYLE_RECIPE)
            for name, split, sizes, form in STYLE_LESSON
        ]
    return list(dict.fromkeys(runs))  # the lesson's canonical stratified run may be in the grid


def _place_data():
    spec = importlib.util.spec_from_file_location("place_data", ROOT / "dataset" / "place_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def placed_label_columns(name, data_dir):
    """The label columns of data set `name` placed in data_dir, or None when it is not there."""
    path = Path(data_dir) / f"{name}.csv"
    if not path.exists():
        return None
    place_data = _place_data()
    variant = place_data.identify(name, place_data.checksums(path), plain_only=True)
    if variant is None:
        raise SystemExit(
            f"error: {path} is not a copy of {name} that dataset/place_data.py knows (checksum)"
        )
    return place_data.label_columns(path, variant)


def execute(run, args, labels):
    """Run one cell into its folder (resuming a network snapshot); its output goes to run.log
    there."""
    folder = run.folder(args.runs)
    folder.mkdir(parents=True, exist_ok=True)
    csv = Path(args.data_dir) / f"{run.dataset}.csv"
    command = run.command(csv, labels, args.processes, args.chemprop or "chemprop")
    command += ["--output-dir", str(folder)]
    if run.model == "network" and (folder / "checkpoints" / "last.pt").exists():
        command.append("--resume")
    print(f"running {folder}", flush=True)
    with open(folder / "run.log", "a") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode:
        raise SystemExit(
            f"error: {folder} failed (exit status {done.returncode}); see {folder / 'run.log'}"
        )


def harvest(run, runs):
    """The ledger entry of a run whose folder holds its metrics.json, or None."""
    folder = run.folder(runs)
    if not (folder / "metrics.json").exists():
        return None
    metrics = json.loads((folder / "metrics.json").read_text())
    score = "roc_auc" if metrics["task"] == "classification" else "rmse"
    splits = json.loads((folder / "splits.json").read_text())
    rows = [splits[name] for name in ("train", "dev", "test")]
    return {
        **asdict(run),
        "score": score,
        "test": metrics[f"test_{score}"],
        "dev": metrics.get(f"best_dev_{score}", metrics.get(f"dev_{score}")),
        "best_epoch": metrics.get("best_epoch"),
        "tasks": len(metrics["label_columns"]),
        "molecules": sum(map(len, rows)),
        "seconds": metrics.get("wall_seconds"),  # the run's own clock: no torchrun start-up
        # what the identical-splits checks compare, once the folder is gone
        "split_sha256": split_digest(splits),
    }


def split_digest(described):
    """A digest of the file rows in train, dev and test of a split described as in splits.json."""
    rows = [described[name] for name in ("train", "dev", "test")]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def count_repeats(runs, ledger, placed, data_dir):
    """Add to the ledger, for each split and seed with a finished canonical run whose data is
    here, how many dev and test molecules repeat one of an earlier part (`repeats_across_parts`).
    The split is drawn again as the runs drew it, and must match the digest they recorded."""
    tables = {}
    for run in runs:
        in_grid = run.form == "canonical" and (run.split, run.sizes) in GRID[run.dataset]["splits"]
        if not in_grid or run.key not in ledger or run.repeats_key in ledger:
            continue
        if placed[run.dataset] is None:
            continue
        if run.dataset not in tables:  # as the runs read it: canonical, unparsable rows dropped
            csv = Path(data_dir) / f"{run.dataset}.csv"
            table = read_molecule_csv(csv, "smiles", placed[run.dataset], smiles_form="canonical")
            tables[run.dataset] = table, choose_task_kind("auto", table)
        table, kind = tables[run.dataset]
        sizes = parse_sizes(run.sizes)
        splits = split_molecules(table, run.split, run.seed, kind, sizes)
        digest = split_digest(describe_split(table, splits, run.split, run.seed, sizes))
        if ledger[run.key]["split_sha256"] not in (None, digest):
            raise SystemExit(
                f"error: {run.key}: the split drawn again to count repeats is not the one the "
                "run recorded"
            )
        ledger[run.repeats_key] = {
            "split_sha256": digest,
            **repeats_across_parts(table.smiles, splits),
        }


def load_ledger(path):
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def write_whole(path, content):
    """Write `path` (text or bytes) through a sibling file: one cut short leaves the previous
    version whole."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(content) if isinstance(content, bytes) else partial.write_text(content)
    partial.replace(path)


def save_ledger(ledger, path):
    lines = [
        f" {json.dumps(key)}: {json.dumps(ledger[key])}" for key in sorted(ledger)
    ]  # a run a line: git diffs
    write_whole(path, "{\n" + ",\n".join(lines) + "\n}\n")


def ensemble_key(group):
    """The ledger's name for the ensemble of a group of runs that differ by seed alone."""
    seeds = "-".join(str(seed) for seed in sorted(run.seed for run in group))
    return f"{group[0].key.rsplit('/', 1)[0]}/ensemble_of_seeds_{seeds}"


def seed_groups(runs):
    """The planned runs that can join an ensemble, grouped with those that differ from them by seed
    alone (the style lesson's single-seed runs make no group)."""
    groups = {}
    for run in runs:
        if run.joins_ensembles:
            groups.setdefault(run.key.rsplit("/", 1)[0], []).append(run)
    return [group for group in groups.values() if len(group) > 1]


def ensemble_groups(runs, ledger):
    """The groups of seeds whose runs are all done."""
    return [group for group in seed_groups(runs) if all(r.key in ledger for r in group)]


def predictions_path(run, ledger_path):
    """Where a run's dev and test predictions are kept: beside the ledger, committed with it."""
    ledger_path = Path(ledger_path)
    return ledger_path.with_name(ledger_path.stem + "_predictions") / f"{run.key}.json.gz"


def predict_dev_and_test(run, runs_dir, data_dir):
    """The task, and the dev and test rows, labels and predictions of a finished run's best model
    (scripts/predict.py with its folder)."""
    folder = run.folder(runs_dir)
    try:
        splits, hparams, task = (
            json.loads((folder / f"{name}.json").read_text())
            for name in ("splits", "hparams", "task")
        )
        task, smiles_column = task_from_dict(task), hparams["smiles_column"]
    except (OSError, ValueError, KeyError, PartorchError) as exc:
        raise SystemExit(f"error: {folder}: not a finished training run's folder ({exc})") from None
    frame = pd.read_csv(Path(data_dir) / f"{run.dataset}.csv", dtype=str, keep_default_na=False)
    kept = {"task": task.to_dict()}
    with tempfile.TemporaryDirectory() as scratch:
        for part in ("dev", "test"):
            rows = frame.iloc[
                [row - 2 for row in splits[part]]
            ]  # splits.json numbers rows as an editor does
            rows.to_csv(Path(scratch) / f"{part}.csv", index=False)
            command = [
                sys.executable,
                str(ROOT / "scripts" / "predict.py"),
                str(folder),
                str(Path(scratch) / f"{part}.csv"),
                "--smiles-column",
                smiles_column,
                "--output",
                str(Path(scratch) / "predictions.csv"),
            ]
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            if done.returncode:
                why = (done.stderr.strip() or "?").splitlines()[-1]
                raise SystemExit(f"error: predicting with {folder}: {why}")
            predictions = pd.read_csv(Path(scratch) / "predictions.csv")[task.columns].to_numpy(
                float
            )
            if np.isnan(
                predictions
            ).any():  # the run trained on these molecules: it must predict every one
                raise SystemExit(
                    f"error: {folder}: predict.py left {np.isnan(predictions).any(axis=1).sum()} "
                    f"of its {part} molecules unpredicted"
                )
            labels = rows[task.columns].replace("", "nan").to_numpy(float)
            kept[part] = {
                "rows": splits[part],
                "labels": _nulls(labels),
                "predictions": _nulls(predictions),
            }
    return kept


def _nulls(table):
    """Rows of a float table for JSON (which has no NaN): a missing label as null."""
    return [[None if value != value else value for value in row] for row in table.tolist()]


def keep_predictions(run, args):
    """Save a finished run's dev and test predictions beside the ledger (gzip without a time stamp:
    a run redone alike writes the same bytes)."""
    kept = predict_dev_and_test(run, args.runs, args.data_dir)
    write_whole(
        predictions_path(run, args.ledger), gzip.compress(json.dumps(kept).encode(), mtime=0)
    )


def load_predictions(run, ledger, ledger_path):
    """A run's kept predictions, checked against its ledger entry: a file left by an earlier run of
    the same name (redone since) would score an ensemble of models that are not the ledger's."""
    path = predictions_path(run, ledger_path)
    try:
        kept = json.loads(gzip.decompress(path.read_bytes()))
        task = task_from_dict(kept["task"])
        own = _score(task, kept["test"]["labels"], [kept["test"]["predictions"]])
    except (OSError, EOFError, ValueError, KeyError, TypeError, PartorchError) as exc:
        raise SystemExit(
            f"error: {path}: not a run's kept predictions ({exc}); delete the file, or redo the run"
        ) from None
    if abs(own - ledger[run.key]["test"]) > 1e-3:
        raise SystemExit(
            f"error: {path}: its test {task.score_name} {own:.4f} is not the ledger's "
            f"{ledger[run.key]['test']:.4f} for {run.key}; delete the file, or redo the run"
        )
    return task, kept


def _score(task, labels, predictions):
    """The task's score of the mean of several models' predictions."""
    mean = np.mean(np.array(predictions, dtype=float), axis=0)
    return task.metrics(np.array(labels, dtype=float), task.outputs_for(mean))[task.score_name]


def score_ensemble(group, ledger, ledger_path):
    """The ledger entry of the mean prediction of a group's best models on its dev and test
    molecules, from their kept predictions; None while a seed's are missing."""
    if not all(predictions_path(run, ledger_path).exists() for run in group):
        return None
    loaded = [load_predictions(run, ledger, ledger_path) for run in group]
    task, first = loaded[0]
    scores = {}
    for part in ("dev", "test"):
        if any(kept[part]["rows"] != first[part]["rows"] for _, kept in loaded[1:]):
            raise SystemExit(f"error: {ensemble_key(group)}: the seeds' {part} molecules differ")
        scores[part] = _score(
            task, first[part]["labels"], [kept[part]["predictions"] for _, kept in loaded]
        )
    first_run = asdict(group[0])
    return {
        **{k: first_run[k] for k in ("dataset", "split", "sizes", "model", "form", "recipe")},
        "seeds": [run.seed for run in group],
        "score": task.score_name,
        "test": scores["test"],
        "dev": scores["dev"],
        "tasks": len(task.columns),
    }


def summary(scores):
    sd = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return statistics.mean(scores), sd


def verdict(network, forest, higher_is_better, names=("network", "forest")):
    """How the network's mean compares with the forest's (or `names`' first with their second):
    beats / matches (within two standard errors) / loses, by how much."""
    (mean_n, sd_n), (mean_f, sd_f) = summary(network), summary(forest)
    gain = (mean_n - mean_f) * (1 if higher_is_better else -1)
    noise = 2 * (sd_n**2 / len(network) + sd_f**2 / len(forest)) ** 0.5
    if gain > noise:
        text = f"{names[0]} better by {gain:.3f}"
    elif gain >= -noise:
        text = f"within noise ({gain:+.3f}, two standard errors {noise:.3f})"
    else:
        text = f"{names[1]} better by {-gain:.3f}"
    # a single figure (one seed, or an ensemble) has no spread of its own to put in the noise
    alone = [name for name, scores in zip(names, (network, forest)) if len(scores) == 1]
    if alone:
        text += (
            f" ({' and '.join(f'one {name} figure' for name in alone)}: the noise leaves out "
            f"{'its' if len(alone) == 1 else 'their'} spread)"
        )
    return text


SPLIT_NAMES = {
    "stratified": "stratified",
    "random": "random",
    "scaffold": "scaffold (DeepChem, seed-independent)",
    "scaffold_balanced": "balanced scaffold (chemprop's order, per seed)",
}


def _percent(sizes):
    return "/".join(f"{round(float(s) * 100)}" for s in sizes.split(","))


def dataset_section(name, runs, done, ledger):
    """One data set's table, and how each network recipe (and ensemble) compares with the forest on
    each split; and each recipe's DevGain over the defaults there."""
    finished = [r for r in runs if done.get(r)]
    if not finished:
        return [], [], []
    first = done[finished[0]]
    higher = first["score"] == "roc_auc"
    score_title = "ROC AUC" if higher else "RMSE"
    if higher and first["tasks"] > 1:
        score_title = f"ROC AUC, mean over {first['tasks']} tasks"
    lines = [
        f"## {name} ({first['molecules']:,} molecules, canonical SMILES)",
        "",
        f"| split (train/dev/test %) | model | seeds | test {score_title} | per seed | dev, mean "
        f"| best dev epoch | minutes per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts, repeats, dev_gains, standings = [], [], [], []
    for split, sizes in GRID[name]["splits"]:
        cell = [r for r in finished if (r.split, r.sizes) == (split, sizes)]
        _check_identical_splits(name, split, cell, done)
        repeats += _repeats_line(f"{SPLIT_NAMES[split]} {_percent(sizes)}", cell, ledger)
        scores, devs, minutes, ran = {}, {}, {}, {}  # ran: each label's seeds
        for label in sorted(
            dict.fromkeys(r.label for r in cell),
            key=lambda m: (m == "forest", m in PEERS, m != "network"),
        ):
            entries = [(r, done[r]) for r in cell if r.label == label]
            scores[label], ran[label] = (
                [entry["test"] for _, entry in entries],
                [r.seed for r, _ in entries],
            )
            minutes[label] = _median_minutes(entries)
            devs[label] = {r.seed: entry["dev"] for r, entry in entries if entry["dev"] is not None}
            lines.append(f"| {SPLIT_NAMES[split]} {_percent(sizes)} | {label} | {_row(entries)} |")
            ensemble = ledger.get(ensemble_key([r for r, _ in entries]))
            if ensemble and ensemble["members"] == {r.key: entry["test"] for r, entry in entries}:
                label = f"{label}, ensemble of {len(entries)} seeds"
                scores[label], devs[label] = (
                    [ensemble["test"]],
                    {seed: ensemble["dev"] for seed in ensemble["seeds"]},
                )
                lines.append(
                    f"| {SPLIT_NAMES[split]} {_percent(sizes)} | {label} "
                    f"| {_row_of_one(ensemble)} |"
                )
        standings.append(
            dev_pick(
                f"{name} {SPLIT_NAMES[split]} {_percent(sizes)}",
                scores,
                devs,
                ran,
                higher,
                same_test_set=split in SEED_INDEPENDENT_SPLITS,
            )
        )
        forest = scores.pop("forest", None)
        networks = {label: s for label, s in scores.items() if label not in PEERS}
        for label, network in networks.items() if forest else ():
            recipe = "" if label == "network" else label.replace("network", "", 1)
            verdicts.append(
                f"- {SPLIT_NAMES[split]} {_percent(sizes)}{recipe}: "
                f"{verdict(network, forest, higher)}"
                f"{_dev_gain_text(devs[label], devs.get('network', {}), higher) if recipe else ''}"
            )
        for recipe in dict.fromkeys(
            r.recipe for r in cell if r.model == "network" and r.recipe != "default"
        ):
            gain, seeds = dev_gain(devs[f"network, {recipe}"], devs.get("network", {}), higher)
            preset_gain, preset_seeds = gain_over_preset(recipe, devs, higher)
            if gain is not None:
                dev_gains.append(
                    DevGain(
                        recipe,
                        f"{name} {split} {_percent(sizes)}",
                        gain,
                        len(seeds),
                        minutes.get(f"network, {recipe}"),
                        minutes.get("network"),
                        preset_gain,
                        len(preset_seeds),
                    )
                )
    return (
        lines + ["", *verdicts] + ([""] if verdicts else []) + repeats + ([""] if repeats else []),
        dev_gains,
        [s for s in standings if s],
    )


class Standing(NamedTuple):
    """On one split: the forest's test scores, and those of the network recipe with the best mean
    dev score."""

    where: str  # data set, split, sizes
    forest: list
    label: str  # "network" (the defaults) or "network, RECIPE"
    dev: float  # its mean dev score
    network: list
    higher: bool  # ROC AUC, or RMSE
    chemprop: list = None  # its test scores, where it ran
    presets: dict = None  # {preset name: its recipe's test scores}, where it ran
    ran: dict = None  # {model's label: the seeds of its scores, in their order}
    same_test_set: bool = False  # whether every seed tests on the same molecules

    def row(self):
        against_chemprop = "- | -"
        if self.chemprop:
            network, chemprop, shared = self._on_shared_seeds(
                (self.label, self.network), ("chemprop", self.chemprop)
            )
            against_chemprop = (
                f"{self._scores_text(self.chemprop)} | "
                f"{verdict(network, chemprop, self.higher, ('network', 'chemprop'))}{shared}"
            )
        return (
            f"| {self.where} | {self.label} | {self.dev:.3f} | {_mean_sd(self.network)} | "
            f"{_mean_sd(self.forest)} | {verdict(self.network, self.forest, self.higher)} | "
            f"{against_chemprop} |"
        )

    def preset_row(self, name):
        """--preset NAME's recipe against the better of the forest and chemprop here (by mean
        test score): the bar a preset for accuracy is to clear."""
        peers = {"forest": self.forest, **({"chemprop": self.chemprop} if self.chemprop else {})}
        best = (max if self.higher else min)(peers, key=lambda peer: statistics.mean(peers[peer]))
        scores = (self.presets or {}).get(name)
        text = "-"
        if scores:
            label = f"network, {PRESET_RECIPES[name]}"
            preset, peer, shared = self._on_shared_seeds((label, scores), (best, peers[best]))
            text = verdict(preset, peer, self.higher, ("preset", best)) + shared
        return (
            f"| {self.where} | {self._scores_text(scores)} | {_mean_sd(self.forest)} "
            f"| {self._scores_text(self.chemprop)} | {best} | {text} |"
        )

    def _on_shared_seeds(self, one, other):
        """Two models' (label, scores) cut to the seeds both ran, where their seeds differ: on a
        split drawn per seed, one seed's test set can be harder for every model than another's.
        Returns both lists and a note naming the seeds, empty where nothing was cut (nor is
        anything cut where every seed tests on the same molecules: each seed's figure then
        differs by its training alone, and a mean over more seeds is the better estimate)."""
        (label, scores), (other_label, other_scores) = one, other
        seeds = self.ran or {}
        if self.same_test_set or label not in seeds or other_label not in seeds:
            return scores, other_scores, ""
        shared = [seed for seed in seeds[label] if seed in seeds[other_label]]
        if not shared or sorted(seeds[label]) == sorted(seeds[other_label]):
            return scores, other_scores, ""

        def on_shared(who, values):
            return [value for seed, value in zip(seeds[who], values) if seed in shared]

        return (
            on_shared(label, scores),
            on_shared(other_label, other_scores),
            f"; on the {_seeds(shared)} that both ran",
        )

    def _scores_text(self, scores):
        """Mean +- deviation, saying so where fewer seeds ran than the forest's."""
        if not scores:
            return "not run yet"
        fewer = len(scores) < len(self.forest)
        return _mean_sd(scores) + (f" ({len(scores)} seed{_plural(len(scores))})" if fewer else "")


def dev_pick(where, scores, devs, ran, higher, same_test_set=False):
    """The single network (no ensemble) with the best mean dev score among those with one for every
    seed the forest ran, as a Standing; None without a forest or such a network. Its test score is
    read, never chosen by."""
    if "forest" not in ran:
        return None
    full = [
        label
        for label in ran
        if label != "forest" and label not in PEERS and sorted(devs[label]) == sorted(ran["forest"])
    ]
    if not full:
        return None
    best = (max if higher else min)(full, key=lambda label: statistics.mean(devs[label].values()))
    mean_dev = statistics.mean(devs[best].values())
    chemprop = scores.get("chemprop")
    presets = {name: scores.get(f"network, {recipe}") for name, recipe in PRESET_RECIPES.items()}
    return Standing(
        where,
        scores["forest"],
        best,
        mean_dev,
        scores[best],
        higher,
        chemprop,
        presets,
        ran,
        same_test_set,
    )


def standings_section(standings):
    """The summary: on each split, the network a user would pick from dev scores alone, against the
    forest."""
    if not standings:
        return []
    return [
        "## In short: the network dev picks, against the forest",
        "",
        "On each split, of the single networks (defaults and recipes; no ensembles) with a dev "
        "score for every seed the forest ran, the one with the best mean dev score, and its test "
        "score; a network whose dev scores were not kept (a dash below) is not a candidate. "
        "Scores are ROC AUC, or RMSE on the regression sets (lower is better). Where chemprop "
        "ran fewer seeds on a split drawn per seed, its verdict is on the seeds both ran.",
        "",
        "| data set, split (train/dev/test %) | network | dev, mean | test | forest, test "
        "| verdict | chemprop, test | verdict |",
        "|---|---|---|---|---|---|---|---|",
        *(standing.row() for standing in standings),
        "",
    ]


def repeats_summary(runs, ledger):
    """Which splits put one molecule in two parts, and the largest share of a test set that is
    also in train, on any split and seed."""
    counted = {}  # split -> {seed: its counts}
    for run in runs:
        if run.repeats_key in ledger:
            where = f"{run.dataset} {SPLIT_NAMES[run.split]} {_percent(run.sizes)}"
            counted.setdefault(where, {})[run.seed] = ledger[run.repeats_key]
    repeating = [where for where, seeds in counted.items() if _any_repeat(seeds.values())]
    if not repeating:
        return [] if not counted else [f"{REPEATS_INTRO}: none, on any split or seed.", ""]
    where, seed = max(
        ((where, seed) for where in repeating for seed in counted[where]),
        key=lambda pair: _share_in_train(counted[pair[0]][pair[1]]),
    )
    most = counted[where][seed]
    return [
        f"{REPEATS_INTRO}: none on {len(counted) - len(repeating)} of the {len(counted)} splits; "
        f"some on {', '.join(repeating)}. At most {most['test_in_train']} of {most['test']} test "
        f"molecules ({100 * _share_in_train(most):.1f} %, {where}, seed {seed}) are also in "
        "train: a model can score those from memory.",
        "",
    ]


def _share_in_train(counts):
    return counts["test_in_train"] / counts["test"]


def presets_section(standings):
    """Each preset's recipe on every split, against the better of the two other model families:
    where it holds its own and where it does not, by how much."""
    lines = []
    for name, recipe in PRESET_RECIPES.items() if standings else ():
        lines += [
            f"## `--preset {name}` against the forest and chemprop",
            "",
            f"The preset's recipe (network, {recipe}) on each split against the better of the "
            "forest and chemprop there, by mean test score. A verdict that names a peer is the "
            "gap by which the preset falls short of it. Where the two ran different seeds on a "
            "split drawn per seed, it compares them on the seeds both ran: one seed's test set "
            "can be harder for every model than another's.",
            "",
            f"| data set, split (train/dev/test %) | `--preset {name}`, test | forest, test "
            "| chemprop, test | the better of the two | verdict |",
            "|---|---|---|---|---|---|",
            *(standing.preset_row(name) for standing in standings),
            "",
        ]
    return lines


def _row_of_one(ensemble):
    """The table's cells for an ensemble: one figure, made of the seeds' models."""
    return (
        f"{', '.join(map(str, ensemble['seeds']))} | {ensemble['test']:.3f} "
        f"| - | {ensemble['dev']:.3f} | - | -"
    )


def dev_gain(recipe, default, higher_is_better):
    """A recipe's mean dev score minus the defaults' on the seeds both ran (positive: better), and
    those seeds: the figure a recipe is chosen by. (None, []) when no seed ran both."""
    seeds = sorted(recipe.keys() & default.keys())
    if not seeds:
        return None, seeds
    return statistics.mean(recipe[s] - default[s] for s in seeds) * (
        1 if higher_is_better else -1
    ), seeds


def preset_base(recipe):
    """The preset recipe that `recipe` adds flags to, or None: such a variant is judged against
    the preset, the recipe it would replace, not against the defaults alone."""
    flags = RECIPES[recipe]
    return next(
        (
            base
            for base in PRESET_RECIPES.values()
            if base != recipe and flags[: len(RECIPES[base])] == RECIPES[base]
        ),
        None,
    )


def gain_over_preset(recipe, devs, higher_is_better):
    """dev_gain of `recipe` over the preset recipe it adds flags to; (None, []) for a recipe
    that is no preset's variant."""
    base = preset_base(recipe)
    if base is None:
        return None, []
    return dev_gain(devs[f"network, {recipe}"], devs.get(f"network, {base}", {}), higher_is_better)


def _dev_gain_text(recipe, default, higher_is_better):
    gain, seeds = dev_gain(recipe, default, higher_is_better)
    return (
        ""
        if gain is None
        else f"; on dev, {gain:+.3f} against the default network's mean ({_seeds(seeds)})"
    )


class DevGain(NamedTuple):
    """A recipe's mean dev gain over the defaults on one split, and what it costs there."""

    recipe: str
    where: str  # data set, split, sizes
    gain: float
    seeds: int  # how many seeds both ran
    minutes: float | None  # the recipe's median minutes per run
    default_minutes: float | None
    preset_gain: float | None = None  # for a preset's variant: its gain over the preset
    preset_seeds: int = 0

    def text(self):
        cost = (
            f"; {self.minutes:.1f} min a run, the defaults {self.default_minutes:.1f}"
            if self.minutes is not None and self.default_minutes is not None
            else ""
        )
        against_preset = (
            f", against the preset {self.preset_gain:+.3f} ({self.preset_seeds} "
            f"seed{_plural(self.preset_seeds)})"
            if self.preset_gain is not None
            else ""
        )
        return (
            f"{self.where} {self.gain:+.3f} ({self.seeds} seed{_plural(self.seeds)}{cost})"
            f"{against_preset}"
        )


def defaults_section(dev_gains, datasets):
    """Which recipe the dev scores would make the default: one that raises dev wherever it was
    compared."""
    lines = [
        "## Choosing the defaults, by dev scores only",
        "",
        "Each recipe's mean dev score minus the default network's, on the seeds both ran "
        "(positive: better; RMSE's sign turned), where both have dev scores in the ledger, and "
        "the median minutes a run of each; a recipe that adds flags to a preset's recipe, also "
        "its gain over that recipe, which it must beat too. Test scores play no part.",
        "",
    ]
    for recipe in dict.fromkeys(gain.recipe for gain in dev_gains):
        cells = [gain for gain in dev_gains if gain.recipe == recipe]
        worse = [cell.where for cell in cells if cell.gain < 0]
        below_preset = [
            cell.where for cell in cells if cell.preset_gain is not None and cell.preset_gain < 0
        ]
        planned = sum(
            len(GRID[name]["splits"])
            for name in datasets
            if not (recipe in CLASSIFICATION_RECIPES and GRID[name].get("regression"))
        )
        if worse:
            choice = f"lowers dev on {', '.join(worse)}: stays a flag"
        elif below_preset:
            choice = f"lowers dev against the preset on {', '.join(below_preset)}: stays a flag"
        else:
            choice = (
                f"raises dev wherever compared ({len(cells)} of the grid's {planned} splits): "
                "a candidate for the default"
            )
        lines.append(
            f"- **{recipe}** (`{' '.join(RECIPES[recipe])}`): "
            f"{', '.join(cell.text() for cell in cells)}. "
            f"{choice}."
        )
    return lines + [""] if dev_gains else []


def _plural(count):
    return "" if count == 1 else "s"


def _seeds(seeds):
    return f"seed{_plural(len(seeds))} " + ", ".join(map(str, seeds))


def _median_minutes(entries):
    minutes = [entry["seconds"] / 60 for _, entry in entries if entry["seconds"] is not None]
    return statistics.median(minutes) if minutes else None


def _row(entries):
    """seeds | mean +- sd | per seed | dev | best epochs | minutes, for one model on one split."""
    tests = [entry["test"] for _, entry in entries]
    devs = [entry["dev"] for _, entry in entries if entry["dev"] is not None]
    minutes = _median_minutes(entries)
    epochs = [str(entry["best_epoch"]) for _, entry in entries if entry["best_epoch"] is not None]
    return " | ".join(
        [
            ", ".join(str(run.seed) for run, _ in entries),
            _mean_sd(tests),
            ", ".join(f"{t:.3f}" for t in tests),
            f"{statistics.mean(devs):.3f}" if devs else "-",
            ", ".join(epochs) or "-",
            f"{minutes:.1f}" if minutes is not None else "-",
        ]
    )


REPEAT_FIELDS = ("test_in_train", "test_in_dev", "dev_in_train")


REPEATS_INTRO = (
    "The same molecule (canonical SMILES) in two parts of a split, counted on every split and "
    "seed of the report (each data set's section gives the counts)"
)


def _repeats_line(where, cell, ledger):
    """How many dev and test molecules of a split are also in an earlier part, seed by seed (one
    figure where every seed has the same), as a list of one line; empty where none were counted."""
    counted = {r.seed: ledger[r.repeats_key] for r in cell if r.repeats_key in ledger}
    if not counted:
        return []
    if not _any_repeat(counted.values()):
        return [f"- {where}, the same molecule in two parts ({_seeds(list(counted))}): none"]

    def figures(field, total):
        counts = [str(c[field]) for c in counted.values()]
        totals = [str(c[total]) for c in counted.values()]
        return f"{_one_or_each(counts)} of {_one_or_each(totals)}"

    return [
        f"- {where}, the same molecule in two parts ({_seeds(list(counted))}): "
        f"{figures('test_in_train', 'test')} test molecules are also in train, "
        f"{figures('test_in_dev', 'test')} in dev; {figures('dev_in_train', 'dev')} dev molecules "
        "in train"
    ]


def _any_repeat(entries):
    """Whether any of a split's seeds (their ledger entries) puts a molecule in two parts."""
    return any(entry[field] for entry in entries for field in REPEAT_FIELDS)


def _one_or_each(values):
    return values[0] if len(set(values)) == 1 else ", ".join(values)


def _mean_sd(scores):
    mean, sd = summary(scores)
    return f"{mean:.3f} +- {sd:.3f}" if len(scores) > 1 else f"{mean:.3f}"


def _check_identical_splits(name, split, cell, done):
    by_seed = {}
    for run in cell:
        if done[run][
            "split_sha256"
        ]:  # None: recorded before the ledger kept it, checked when it ran
            by_seed.setdefault(run.seed, set()).add(done[run]["split_sha256"])
    for seed, digests in by_seed.items():
        if len(digests) > 1:
            raise SystemExit(
                f"error: {name} {split} seed {seed}: "
                "the network and the forest saw different splits"
            )


def style_section(seed, done):
    """The raw-against-canonical rows: the same molecules and split, checked, only the strings
    differ."""
    lines = [
        f"## The writing-style lesson (BBBP, network, {STYLE_RECIPE}, seed {seed})",
        "",
        "The same network, seed, molecules and split (checked); only the strings differ.",
        "",
        "| split (train/dev/test %) | SMILES given to the network | test ROC AUC |",
        "|---|---|---|",
    ]
    runs = [
        Run(name, split, sizes, "network", form, seed, STYLE_RECIPE)
        for name, split, sizes, form in STYLE_LESSON
    ]
    finished = [run for run in runs if done.get(run)]
    for run in finished:
        twin = next(
            (
                r
                for r in finished
                if (r.split, r.sizes) == (run.split, run.sizes) and r.form != run.form
            ),
            None,
        )
        digests = {done[r]["split_sha256"] for r in (run, twin) if r}
        if None not in digests and len(digests) > 1:
            raise SystemExit(
                f"error: BBBP {run.split} seed {seed}: "
                "the raw and canonical runs saw different splits"
            )
        lines.append(
            f"| {SPLIT_NAMES[run.split]} {_percent(run.sizes)} | {run.form} "
            f"| {done[run]['test']:.3f} |"
        )
    return lines + [""] if finished else []


def missing_section(runs, placed, done):
    lines = []
    for name in dict.fromkeys(r.dataset for r in runs):
        if placed[name] is None and not any(done.get(r) for r in runs if r.dataset == name):
            lines.append(
                f"- {name}: not placed here (`python dataset/place_data.py {name}`), nothing run"
            )
            continue
        waiting = [r for r in runs if r.dataset == name and not done.get(r)]
        groups = dict.fromkeys((r.split, r.sizes, r.label, r.form) for r in waiting)
        for split, sizes, label, form in groups:
            seeds = [
                str(r.seed)
                for r in waiting
                if (r.split, r.sizes, r.label, r.form) == (split, sizes, label, form)
            ]
            lines.append(
                f"- {name} {split} {_percent(sizes)}, {label}, {form} SMILES: {_seeds(seeds)}"
            )
    return ["## Not run yet", "", *lines, ""] if lines else []


HEADER = """# Accuracy: the network against a fingerprint forest

Written by `{command}`
from the runs recorded in `{ledger}`: edit the script, not this file. Test scores, mean +-
sample standard deviation over the seeds listed, each seed's figure after it; "dev, mean" is the
best dev epoch's score (the figure any choice of recipe is made on), "minutes per run" the median
over the seeds on this 2-core machine.

- **network**: `scripts/basic_neural_network_ddp.py` with its default settings on
  {processes} processes (`torchrun --nproc-per-node {processes}`): a bidirectional LSTM of 2
  layers of 64 (0.2 M weights), at most 30 epochs, stopping after 10 without a better dev score,
  the best dev epoch's weights scored on test. Until the section "Choosing the defaults" showed
  it no better on dev at 3 to 9 times the minutes, the default was the large network (3 layers of
  128, 1.1 M weights): the recipes measured on it are named `large`.{recipes}
- **forest**: `benchmarks/baseline_fingerprints.py`: 500 trees on 2048-bit Morgan
  fingerprints of radius 2, one forest per label column.
- **chemprop** (with `--chemprop`): `benchmarks/baseline_chemprop.py`: chemprop 2's D-MPNN at
  its defaults (50 epochs, the best dev epoch's weights), given the same molecules and split.
- **SMILES**: RDKit canonical (the scripts' default); rows RDKit cannot parse
  are dropped (11 in BBBP). Both models see the same molecules and, for each
  seed, the same split (checked from a digest of the `splits.json` each run writes).
- **the same molecule in two parts**: a data set can give one molecule twice (BBBP does), and
  a model can score a test molecule it trained on from memory. Each data set's section counts,
  split by split and seed by seed, the test molecules whose canonical SMILES is also in train or
  dev, and the dev molecules also in train (on the split drawn again from the data, checked
  against the runs' digest). A scaffold split keeps the copies together: they share a scaffold.
- **splits**: stratified by class, or random (several tasks, regression); scaffold
  puts whole Bemis-Murcko scaffold groups, largest first, in train, then dev,
  then test (DeepChem's order: the seed does not change it, so its spread is
  the training's alone); balanced scaffold sends groups bigger than half of dev
  or test first and shuffles the rest by seed (chemprop's `scaffold_balanced`
  order), then fills train, dev and test as scaffold does.
- **ensemble of N seeds** (scaffold only, where every seed has the same dev and test
  molecules): the mean of the seeds' best models' predictions, one figure; each seed's
  are kept beside the ledger, so seeds run on different machines make one.
- **presets**: a recipe marked `--preset NAME` is what that preset of the training scripts
  sets, chosen on dev scores; test scores were computed once per recipe and played no part.
  The first choice was made on BBBP's scaffold split, where every candidate (the shipped
  encoder fine-tuned whole or frozen for 5 epochs first, with and without RDKit descriptors,
  Morgan counts or both, and augmentation) ran every seed: both kinds together scored 0.979 on
  dev, Morgan counts alone 0.974 and 15 RDKit descriptors alone 0.971, margins of the size of
  the seeds' spread. Then all of RDKit's 2D descriptors in place of the 15
  (pretrained-rdkit2dfull-morgan-augment-long) lowered the mean dev RMSE on Lipophilicity by
  0.055 and on ESOL by 0.029, raised the mean dev ROC AUC on SIDER by 0.019 and on BBBP
  stratified and balanced scaffold by 0.003 (5 seeds each) and on HIV scaffold by 0.006 (seed
  1729; seeds 1 to 4 ran after the choice), and scored 0.003 lower on BBBP scaffold (5 seeds),
  within its seeds' spread: it became `accurate`. On HIV stratified it ran after the choice,
  all 5 seeds; the first preset's rows stay in the tables.
  Test-time augmentation (`--tta 10`: each molecule's output averaged with those of 10 random
  SMILES of it) was tried on dev alone, on the five HIV scaffold models of the preset (their
  kept best weights): dev ROC AUC moved by -0.0003 to +0.0003 (0.8162, 0.8135, 0.8034,
  0.8157, 0.8199 to 0.8165, 0.8134, 0.8031, 0.8159, 0.8198), so the preset does not use it;
  their test scores with it were not computed.
  Screened later on HIV scaffold, seed 1729, against the preset's best dev there (0.8162),
  each lower and not taken: a head of 512 units (`--head-size 512`, the head512 rows: 0.8114);
  a third of the learning rate (`--lr 3e-4`, the lr3e-4 rows: 0.8085, its dev score swinging
  as much: 0.8085, 0.7942, 0.8039, 0.7742 at epochs 7 to 10);
  batches drawn at random in place of batches of one length (`--sampler random`, the random
  rows: 0.7926 at epoch 6 of 26, on another CPU; HIV's actives are 7.3 % of the longest fifth
  of its SMILES and 2.1 % of the shortest, so a length's batches hold few or many of them, and
  that is not what holds the preset back); a global batch of 256 in place of 64 at the same
  rate (`--batch-size 256`, the batch256 rows: 0.8012 at epoch 10 of 30, on that CPU, its dev
  score swinging as much: 0.8012, 0.8002, 0.7965, 0.7661 at epochs 10 to 13);
  `--class-weight balanced` (0.7980; a run outside the ledger); and an exponential moving
  average of the weights (decay 0.999, about two epochs' steps; a throwaway change to the
  script, not a flag, outside the ledger: 0.7904 at epoch 4 of 24). The averaged weights' dev
  score rose smoothly to 0.790 and fell, while the preset's own moves by up to 0.027 from one
  epoch to the next (0.7900, 0.8162, 0.7891 at epochs 6 to 8): a best-epoch dev figure here
  holds that swing.
  Then, on the same split: the preset without its Morgan counts (`--extra-features
  rdkit2d-full`, the pretrained-rdkit2dfull-augment-long rows: 0.8029 at epoch 7 of 27, lower);
  and with 500 times its weight decay (`--weight-decay 0.05`, the
  pretrained-rdkit2dfull-morgan-wd5e-2-augment-long rows: 0.8203, 0.8131 and 0.8095 on seeds
  1729, 1 and 2, against the preset's 0.8162, 0.8135 and 0.8034: a mean 0.003 higher, within
  the spread of the preset's seeds (0.006), so level; a change of preset needs every set's runs,
  and these were not made).
  The encoder fine-tuned at a tenth of the head's rate (`--pretrained-lr-scale 0.1`, the
  pretrained-rdkit2dfull-morgan-enclr1e-1-augment-long rows: the other usual fine-tuning
  schedule, beside the frozen start of the pretrained-frozen rows) scored 0.8024 at epoch 7 of
  27 on seed 1729, lower, its dev score swinging as much (0.8024, 0.7822, 0.7652 at epochs 7
  to 9): the swing does not come from the encoder moving at the full rate.
  Where the forest's lead on this split comes from: a network given the forest's own input
  (`examples/fingerprint_mlp_ddp.py`, 2,048 Morgan bits into two layers of 512; a run outside
  the ledger, on the same split, checked by its digest) scored 0.737 on dev (test 0.686),
  against the forest's 0.847 on seed 1729: on Morgan bits, 500 trees lead a network by 0.11 on
  dev here. The encoder and the descriptors bring the preset to 0.814 (mean of 5 seeds); no
  change to its recipe screened here has moved that level beyond its seeds' spread.
  Nor does the network carry much that the forest lacks there: a blend of the two (outside the
  ledger; seeds 1729 and 1 to 4, each seed's forest fitted again for it) that averages each
  molecule's rank under the preset and under the forest, the preset's weight chosen on dev from
  0, 0.1, ..., 1 (0.1 to 0.5, most often 0.2), scored 0.846 on dev against the forest's 0.842,
  and 0.797 on test against 0.793: higher on every seed, by 0.002 to 0.006 on test. The scripts
  do not offer it.
- "within noise" means the means differ by less than two standard errors of
  their difference.
- a dash for dev or minutes: the run was recorded from an earlier report, whose
  run folders were lost, before the ledger kept those figures.
"""


def write_report(runs, placed, ledger, args):
    command = (
        f"python benchmarks/accuracy.py --datasets {' '.join(args.datasets)} "
        f"--seeds {' '.join(map(str, args.seeds))}"
        + (f" --recipes {' '.join(args.recipes)}" if args.recipes else "")
        + (" --chemprop CHEMPROP" if args.chemprop else "")
    )
    presets = {recipe: name for name, recipe in PRESET_RECIPES.items()}
    recipes = "".join(
        f"\n  - **network, {name}**: the defaults plus `{' '.join(RECIPES[name])}`"
        + (f" (`--preset {presets[name]}`)" if name in presets else "")
        for name in args.recipes
    )
    sections = [
        HEADER.format(
            command=command,
            ledger=os.path.relpath(args.ledger, ROOT),
            processes=args.processes,
            recipes=recipes,
        )
    ]
    done = {run: ledger.get(run.key) for run in runs}
    tables, dev_gains, standings = [], [], []
    for name in dict.fromkeys(r.dataset for r in runs):
        lines, gains, stands = dataset_section(
            name, [r for r in runs if r.dataset == name and r.form == "canonical"], done, ledger
        )
        tables, dev_gains, standings = tables + lines, dev_gains + gains, standings + stands
    sections += (
        standings_section(standings)
        + repeats_summary(runs, ledger)
        + presets_section(standings)
        + tables
        + defaults_section(dev_gains, args.datasets)
    )
    if "BBBP" in args.datasets:
        sections += style_section(args.seeds[0], done)
    sections += missing_section(runs, placed, done)
    text = "\n".join(sections).rstrip() + "\n"
    write_whole(args.doc, text)
    print(f"wrote {args.doc}")


def collect(runs, ledger, runs_dir):
    """Copy into the ledger every planned run whose folder holds a finished run (the folder is the
    fresher); return the names of the runs whose entries changed."""
    changed = set()
    for run in runs:
        entry = harvest(run, runs_dir)
        if entry and entry != ledger.get(run.key):
            ledger[run.key] = entry
            changed.add(run.key)
    return changed


def keep_new_predictions(runs, ledger, placed, args, fresh):
    """Keep the predictions of the finished runs of a group of seeds whose folders and data are
    here, where none are kept yet (a run finished by an older report) or the ledger has just taken
    the run from its folder (`fresh`: a run redone since its predictions were kept)."""
    for run in (run for group in seed_groups(runs) for run in group):
        finished_here = run.key in ledger and (run.folder(args.runs) / "best_model.pt").exists()
        if (
            finished_here
            and placed[run.dataset] is not None
            and (run.key in fresh or not predictions_path(run, args.ledger).exists())
        ):
            keep_predictions(run, args)


def main(args):
    args.runs, args.data_dir, args.ledger = (
        Path(p).resolve() for p in (args.runs, args.data_dir, args.ledger)
    )
    placed = {name: placed_label_columns(name, args.data_dir) for name in args.datasets}
    runs = plan(args.datasets, args.seeds, args.recipes, PEERS if args.chemprop else ())
    ledger = load_ledger(args.ledger)
    changed = collect(runs, ledger, args.runs)
    if args.list:
        for run in runs:
            state = (
                "done"
                if run.key in ledger
                else "not placed"
                if placed[run.dataset] is None
                else "to run"
            )
            print(f"{state:10} {run.key}")
        return
    keep_new_predictions(runs, ledger, placed, args, fresh=changed)
    save_ledger(ledger, args.ledger)
    if not args.write_only:
        chosen = [r for r in runs if args.only is None or any(o in r.key + "/" for o in args.only)]
        waiting = [r for r in chosen if placed[r.dataset] is not None and r.key not in ledger]
        for run in sorted(
            waiting, key=lambda r: r.model != "forest"
        ):  # forests first: minutes, not hours
            execute(run, args, placed[run.dataset])
            ledger[run.key] = harvest(run, args.runs)
            if ledger[run.key] is None:
                raise SystemExit(
                    f"error: {run.folder(args.runs)} ended without writing metrics.json"
                )
            keep_new_predictions(runs, ledger, placed, args, fresh={run.key})
            save_ledger(
                ledger, args.ledger
            )  # after every run: a report cut short loses nothing done
    count_repeats(runs, ledger, placed, args.data_dir)
    add_ensembles(runs, ledger, args)
    save_ledger(ledger, args.ledger)
    write_report(runs, placed, ledger, args)  # the whole grid, whatever ran


def add_ensembles(runs, ledger, args):
    """Score (seconds: kept predictions, no training) the ensembles not in the ledger, or whose
    members changed; one whose members changed and whose seeds' predictions are not all kept is
    dropped."""
    for group in ensemble_groups(runs, ledger):
        members = {run.key: ledger[run.key]["test"] for run in group}
        if ledger.get(ensemble_key(group), {}).get("members") != members:
            entry = score_ensemble(group, ledger, args.ledger)
            ledger.pop(ensemble_key(group), None)
            if entry:
                ledger[ensemble_key(group)] = {**entry, "members": members}
            else:
                missing = [
                    run.seed for run in group if not predictions_path(run, args.ledger).exists()
                ]
                print(
                    f"{ensemble_key(group)}: not scored: no predictions kept for {_seeds(missing)} "
                    f"(they are kept when a run's folder and data are here)"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--datasets", nargs="+", choices=list(GRID), default=["BBBP"], help="(default: BBBP)"
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=list(SEEDS), help="(default: 1729 1 2 3 4)"
    )
    parser.add_argument(
        "--recipes",
        nargs="+",
        choices=list(RECIPES),
        default=[],
        help="network recipes to run and report beside the defaults (default: none)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="TEXT",
        help="run only the runs whose name (as --list prints it, plus a final /) "
        "contains one of these, e.g. forest, scaffold_0.8 or network_canonical/ "
        "(the report still covers the whole grid)",
    )
    parser.add_argument(
        "--chemprop",
        metavar="COMMAND",
        help="also run chemprop (benchmarks/baseline_chemprop.py) with this chemprop command, "
        "e.g. a separate environment's bin/chemprop (default: chemprop is not planned)",
    )
    parser.add_argument(
        "--processes", type=int, default=2, help="torchrun processes per network run (default: 2)"
    )
    parser.add_argument(
        "--data-dir", default=str(ROOT / "dataset"), help="where NAME.csv are (default: dataset/)"
    )
    parser.add_argument(
        "--runs",
        default=str(ROOT / "runs" / "accuracy"),
        help="one folder per run (default: runs/accuracy)",
    )
    parser.add_argument(
        "--ledger",
        default=str(ROOT / "docs" / "accuracy_runs.json"),
        help=(
            "every finished run's figures, kept with the project (default: docs/accuracy_runs.json)"
        ),
    )
    parser.add_argument(
        "--doc", default=str(ROOT / "docs" / "accuracy.md"), help="(default: docs/accuracy.md)"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the runs and their state; run nothing"
    )
    parser.add_argument(
        "--write-only",
        action="store_true",
        help="write the report from the ledger and the ensembles "
        "it can score; train nothing (seconds, plus a minute a run whose predictions it keeps)",
    )
    main(parser.parse_args())
