"""Regenerate docs/accuracy.md: the network against a random forest on Morgan
fingerprints, on identical splits, over seeds, for each data set and split.

    python scripts/accuracy_report.py                 # BBBP: 3 splits x 5 seeds x 2 models, 80 minutes here
    python scripts/accuracy_report.py --datasets BBBP HIV SIDER ESOL Lipophilicity
    python scripts/accuracy_report.py --list          # the runs, and which are done
    python scripts/accuracy_report.py --write-only    # the tables from the runs done so far

Every run writes its own folder under --runs (runs/accuracy/DATASET/SPLIT_SIZES/
MODEL_FORM/seed_N). A run whose metrics.json exists is not run again and a
network run cut short continues from its snapshot (--resume), so the command
picks up where it stopped. Data sets other than BBBP must be placed first
(python dataset/place_data.py NAME); one that is not placed is listed as such.
"""
import argparse
from dataclasses import dataclass
import importlib.util
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (1729, 1, 2, 3, 4)
TUTORIAL_SIZES = "0.72,0.18,0.1"  # the training scripts' default
PAPER_SIZES = "0.8,0.1,0.1"  # MoleculeNet's and chemprop's
# data set -> its splits (name, sizes), and flags the network needs there
GRID = {
    "BBBP": {"splits": [("stratified", TUTORIAL_SIZES), ("scaffold", PAPER_SIZES), ("scaffold_balanced", PAPER_SIZES)]},
    "HIV": {"splits": [("stratified", TUTORIAL_SIZES), ("scaffold", PAPER_SIZES)], "network": ["--distributed-eval"]},
    "SIDER": {"splits": [("random", PAPER_SIZES)]},
    "ESOL": {"splits": [("random", PAPER_SIZES)]},
    "Lipophilicity": {"splits": [("random", PAPER_SIZES)]},
}
# The lesson of issue 15: the raw strings' writing style predicts BBBP's label.
STYLE_LESSON = [("BBBP", split, TUTORIAL_SIZES, form) for split in ("scaffold", "stratified")
                for form in ("raw", "canonical")]


@dataclass(frozen=True)
class Run:
    dataset: str
    split: str
    sizes: str
    model: str  # "network" or "forest"
    form: str  # "canonical" or "raw"
    seed: int

    def folder(self, runs):
        return Path(runs) / self.dataset / f"{self.split}_{self.sizes.replace(',', '-')}" / \
            f"{self.model}_{self.form}" / f"seed_{self.seed}"

    def command(self, csv, labels, processes):
        common = [str(csv), "--label-column", *labels, "--split", self.split, "--split-sizes", self.sizes,
                  "--smiles-form", self.form, "--seed", str(self.seed)]
        if self.model == "forest":
            return [sys.executable, str(ROOT / "scripts" / "baseline_fingerprints.py"), *common]
        same_molecules = ["--validate-smiles"] if self.form == "raw" else []  # raw strings of the same 2,039
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
                str(ROOT / "scripts" / "basic_neural_network_ddp.py"), *common, *same_molecules, "--quiet",
                *GRID[self.dataset].get("network", [])]


def plan(datasets, seeds):
    runs = [Run(name, split, sizes, model, "canonical", seed) for name in datasets
            for split, sizes in GRID[name]["splits"] for model in ("forest", "network") for seed in seeds]
    if "BBBP" in datasets:
        runs += [Run(name, split, sizes, "network", form, seeds[0]) for name, split, sizes, form in STYLE_LESSON]
    return list(dict.fromkeys(runs))  # the lesson's canonical stratified run is already in the grid


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
        raise SystemExit(f"error: {path} is not a copy of {name} that dataset/place_data.py knows (checksum)")
    return place_data.label_columns(path, variant)


def execute(run, args, labels):
    """Run one cell into its folder (resuming a network snapshot); its output goes to run.log there."""
    folder = run.folder(args.runs)
    folder.mkdir(parents=True, exist_ok=True)
    command = run.command(Path(args.data_dir) / f"{run.dataset}.csv", labels, args.processes)
    command += ["--output-dir", str(folder)]
    if run.model == "network" and (folder / "checkpoints" / "last.pt").exists():
        command.append("--resume")
    print(f"running {folder}", flush=True)
    with open(folder / "run.log", "a") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"error: {folder} failed (exit status {done.returncode}); see {folder / 'run.log'}")


def result(run, runs):
    """(test score, metrics.json) of a finished run, or None."""
    path = run.folder(runs) / "metrics.json"
    if not path.exists():
        return None
    metrics = json.loads(path.read_text())
    score = "roc_auc" if metrics["task"] == "classification" else "rmse"
    return metrics[f"test_{score}"], metrics


def split_rows(run, runs):
    splits = json.loads((run.folder(runs) / "splits.json").read_text())
    return [splits[name] for name in ("train", "dev", "test")]


def summary(scores):
    sd = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return statistics.mean(scores), sd


def verdict(network, forest, higher_is_better):
    """How the network's mean compares: beats / matches (within two standard errors) / loses, by how much."""
    (mean_n, sd_n), (mean_f, sd_f) = summary(network), summary(forest)
    gain = (mean_n - mean_f) * (1 if higher_is_better else -1)
    noise = 2 * (sd_n ** 2 / len(network) + sd_f ** 2 / len(forest)) ** 0.5
    if gain > noise:
        return f"network better by {gain:.3f}"
    if gain >= -noise:
        return f"within noise ({gain:+.3f}, two standard errors {noise:.3f})"
    return f"forest better by {-gain:.3f}"


SPLIT_NAMES = {"stratified": "stratified", "random": "random", "scaffold": "scaffold (DeepChem, seed-independent)",
               "scaffold_balanced": "balanced scaffold (chemprop's order, per seed)"}


def _percent(sizes):
    return "/".join(f"{round(float(s) * 100)}" for s in sizes.split(","))


def dataset_section(name, runs, args):
    """One data set's table, and how the network compares with the forest on each split."""
    done = {run: result(run, args.runs) for run in runs}
    finished = [r for r in runs if done[r]]
    if not finished:
        return []
    metrics = done[finished[0]][1]
    higher = metrics["task"] == "classification"
    score_title = "ROC AUC" if higher else "RMSE"
    if metrics["task"] == "classification" and len(metrics["label_columns"]) > 1:
        score_title = f"ROC AUC, mean over {len(metrics['label_columns'])} tasks"
    molecules = sum(len(rows) for rows in split_rows(finished[0], args.runs))
    lines = [f"## {name} ({molecules:,} molecules, canonical SMILES)", "",
             f"| split (train/dev/test %) | model | seeds | test {score_title} | per seed | best dev epoch |",
             "|---|---|---|---|---|---|"]
    verdicts = []
    for split, sizes in GRID[name]["splits"]:
        cells = {}
        for model in ("network", "forest"):
            group = [r for r in finished if (r.split, r.sizes, r.model, r.form) == (split, sizes, model, "canonical")]
            cells[model] = [done[r][0] for r in group]
            if not group:
                continue
            mean, sd = summary(cells[model])
            spread = f"{mean:.3f} +- {sd:.3f}" if len(group) > 1 else f"{mean:.3f}"
            seeds = ", ".join(f"{done[r][0]:.3f}" for r in group)
            epochs = ", ".join(str(done[r][1]["best_epoch"]) for r in group) if model == "network" else "-"
            lines.append(f"| {SPLIT_NAMES[split]} {_percent(sizes)} | {model} | "
                         f"{', '.join(str(r.seed) for r in group)} | {spread} | {seeds} | {epochs} |")
        _check_identical_splits(name, split, sizes, finished, args.runs)
        if cells["network"] and cells["forest"]:
            verdicts.append(f"- {SPLIT_NAMES[split]} {_percent(sizes)}: "
                            f"{verdict(cells['network'], cells['forest'], higher)}")
    return lines + ["", *verdicts] + ([""] if verdicts else [])


def _check_identical_splits(name, split, sizes, finished, runs):
    by_seed = {}
    for run in finished:
        if (run.split, run.sizes, run.form) == (split, sizes, "canonical"):
            by_seed.setdefault(run.seed, []).append(split_rows(run, runs))
    for seed, rows in by_seed.items():
        if any(r != rows[0] for r in rows[1:]):
            raise SystemExit(f"error: {name} {split} seed {seed}: the network and the forest saw different splits")


def style_section(args):
    """The raw-against-canonical rows: the same molecules and split, checked, only the strings differ."""
    seed = args.seeds[0]
    lines = [f"## The writing-style lesson (BBBP, network, seed {seed})", "",
             "The same network, seed, molecules and split (checked); only the strings differ.", "",
             "| split (train/dev/test %) | SMILES given to the network | test ROC AUC |", "|---|---|---|"]
    runs = [Run(name, split, sizes, "network", form, seed) for name, split, sizes, form in STYLE_LESSON]
    done = [run for run in runs if result(run, args.runs)]
    for run in done:
        twin = next((r for r in done if (r.split, r.sizes) == (run.split, run.sizes) and r.form != run.form), None)
        if twin and split_rows(run, args.runs) != split_rows(twin, args.runs):
            raise SystemExit(f"error: BBBP {run.split} seed {seed}: the raw and canonical runs saw different splits")
        score = result(run, args.runs)[0]
        lines.append(f"| {SPLIT_NAMES[run.split]} {_percent(run.sizes)} | {run.form} | {score:.3f} |")
    return lines + [""] if done else []


def missing_section(runs, placed, args):
    lines = []
    for name in dict.fromkeys(r.dataset for r in runs):
        if placed[name] is None:
            lines.append(f"- {name}: not placed here (`python dataset/place_data.py {name}`), nothing run")
            continue
        waiting = [r for r in runs if r.dataset == name and not result(r, args.runs)]
        groups = dict.fromkeys((r.split, r.sizes, r.model, r.form) for r in waiting)
        for split, sizes, model, form in groups:
            seeds = [str(r.seed) for r in waiting if (r.split, r.sizes, r.model, r.form) == (split, sizes, model, form)]
            lines.append(f"- {name} {split} {_percent(sizes)}, {model}, {form} SMILES: seeds {', '.join(seeds)}")
    return ["## Not run yet", "", *lines, ""] if lines else []


HEADER = """# Accuracy: the network against a fingerprint forest

Written by `{command}`
from the runs in `{runs}`: edit the script, not this file. Test scores, mean +- sample standard deviation over the seeds
listed, each seed's figure after it.

- **network**: `scripts/basic_neural_network_ddp.py` with its default settings on
  {processes} processes (`torchrun --nproc-per-node {processes}`): at most 30 epochs, stopping
  after 10 without a better dev score, the best dev epoch's weights scored on test.
- **forest**: `scripts/baseline_fingerprints.py`: 500 trees on 2048-bit Morgan
  fingerprints of radius 2, one forest per label column.
- **SMILES**: RDKit canonical (the scripts' default); rows RDKit cannot parse
  are dropped (11 in BBBP). Both models see the same molecules and, for each
  seed, the same split (checked from the `splits.json` each run writes).
- **splits**: stratified by class, or random (several tasks, regression); scaffold
  puts whole Bemis-Murcko scaffold groups, largest first, in train, then dev,
  then test (DeepChem's order: the seed does not change it, so its spread is
  the training's alone); balanced scaffold sends groups bigger than half of dev
  or test first and shuffles the rest by seed (chemprop's `scaffold_balanced`
  order), then fills train, dev and test as scaffold does.
- "within noise" means the means differ by less than two standard errors of
  their difference.
"""


def write_report(runs, placed, args):
    command = f"python scripts/accuracy_report.py --datasets {' '.join(args.datasets)} " \
              f"--seeds {' '.join(map(str, args.seeds))}"
    sections = [HEADER.format(command=command, runs=os.path.relpath(args.runs, ROOT), processes=args.processes)]
    for name in dict.fromkeys(r.dataset for r in runs):
        sections += dataset_section(name, [r for r in runs if r.dataset == name and r.form == "canonical"], args)
    if placed.get("BBBP"):
        sections += style_section(args)
    sections += missing_section(runs, placed, args)
    text = "\n".join(sections).rstrip() + "\n"
    doc = Path(args.doc)
    partial = doc.with_name(doc.name + ".partial")
    partial.write_text(text)
    partial.replace(doc)  # a report cut short leaves the previous one whole
    print(f"wrote {doc}")


def main(args):
    args.runs, args.data_dir = Path(args.runs).resolve(), Path(args.data_dir).resolve()
    placed = {name: placed_label_columns(name, args.data_dir) for name in args.datasets}
    runs = plan(args.datasets, args.seeds)
    if args.list:
        for run in runs:
            state = "done" if result(run, args.runs) else "not placed" if placed[run.dataset] is None else "to run"
            print(f"{state:10} {os.path.relpath(run.folder(args.runs))}")
        return
    if not args.write_only:
        chosen = [r for r in runs if args.only is None or args.only in str(r.folder(""))]
        waiting = [r for r in chosen if placed[r.dataset] is not None and result(r, args.runs) is None]
        for run in sorted(waiting, key=lambda r: r.model != "forest"):  # forests first: minutes, not hours
            execute(run, args, placed[run.dataset])
    write_report(runs, placed, args)  # the whole grid, whatever --only ran


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=list(GRID), default=["BBBP"], help="(default: BBBP)")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS), help="(default: 1729 1 2 3 4)")
    parser.add_argument("--only", help="run only the runs whose folder contains this, e.g. forest or scaffold_ "
                                       "(the report still covers the whole grid)")
    parser.add_argument("--processes", type=int, default=2, help="torchrun processes per network run (default: 2)")
    parser.add_argument("--data-dir", default=str(ROOT / "dataset"), help="where NAME.csv are (default: dataset/)")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "accuracy"),
                        help="one folder per run (default: runs/accuracy)")
    parser.add_argument("--doc", default=str(ROOT / "docs" / "accuracy.md"), help="(default: docs/accuracy.md)")
    parser.add_argument("--list", action="store_true", help="list the runs and their state; run nothing")
    parser.add_argument("--write-only", action="store_true", help="write the report from the runs done; run nothing")
    main(parser.parse_args())
