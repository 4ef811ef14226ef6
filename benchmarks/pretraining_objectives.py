"""Which pretraining objective to fine-tune from, chosen by fine-tuned dev scores.

    python benchmarks/pretraining_objectives.py dataset/MOSES_train.csv.gz \\
        dataset/MOSES_test.csv.gz --molecules 200000 --steps 1500 --seeds 0 1 2 \\
        --encoder shipped=models/moses_descriptors --output docs/pretraining_objectives.json

The first --molecules molecules of the corpus and the first 5,000 of the held-out CSV are
prepared with RDKit descriptors. For each objective of scripts/pretrain_ddp.py (masked
tokens, descriptors, both): one pretraining run on 2 processes of --steps steps, the same
encoder sizes, batch and schedule for each. Then scripts/basic_neural_network_ddp.py
fine-tunes on BBBP from each encoder (and from each --encoder NAME=FOLDER given), and trains
the same classifier from scratch, once per seed, on one split: BBBP's deterministic scaffold
split 80/10/10, canonical SMILES (--split and --split-sizes change it). The table gives the
best dev ROC AUC over the seeds (mean and standard deviation): the choice is made on it. Test
ROC AUC stands beside it, computed by the same runs, to report once the choice is made, not
to make it.
"""

import argparse
import gzip
import json
import os
from pathlib import Path
import statistics
import sys
import tempfile
import time

from speed import run_job

ROOT = Path(__file__).resolve().parents[1]
PREPARE = ROOT / "scripts" / "prepare_data.py"
PRETRAIN = ROOT / "scripts" / "pretrain_ddp.py"
FINE_TUNE = ROOT / "scripts" / "basic_neural_network_ddp.py"
OBJECTIVES = ("masked", "descriptors", "both")
HELD_OUT_MOLECULES = 5000


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("corpus", type=Path, help="the pretraining CSV (MOSES train), SMILES column `SMILES`")
    add("held_out", type=Path, help="a held-out CSV of the same kind (MOSES test)")
    add("--molecules", type=int, default=200_000, help="of the corpus, from its start")
    add("--steps", type=int, default=1500, help="pretraining steps per objective")
    add("--seeds", type=int, nargs="+", default=[0, 1, 2], help="fine-tuning seeds")
    add("--model", type=int, nargs=3, default=[32, 64, 2], metavar=("EMB", "D_MODEL", "LAYERS"))
    add("--encoder", nargs="*", default=[], metavar="NAME=FOLDER", help="encoders to add")
    add(
        "--objectives",
        nargs="*",
        choices=OBJECTIVES,
        default=list(OBJECTIVES),
        help="those to pretrain (none: fine-tune from the --encoder folders and scratch only)",
    )
    add("--data", type=Path, default=ROOT / "dataset" / "BBBP.csv", help="to fine-tune on")
    add("--epochs", type=int, default=30, help="fine-tuning's most (the rung's default)")
    add("--split", default="scaffold")
    add("--split-sizes", default="0.8,0.1,0.1")
    add("--output", type=Path, help="a JSON file of every run's figures and the table")
    return parser


def head_csv(source, rows, target):
    """The header and the first `rows` rows of a CSV (gzipped or not)."""
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt") as f, open(target, "w") as out:
        for i, line in enumerate(f):
            if i > rows:
                break
            out.write(line)
    return target


def prepare_slices(args, work):
    """(the corpus folder, the held-out folder), both with descriptors."""
    corpus, held_out = work / "corpus", work / "held_out"
    head_csv(args.corpus, args.molecules, work / "corpus.csv")
    head_csv(args.held_out, HELD_OUT_MOLECULES, work / "held_out.csv")
    run_job(
        [
            sys.executable,
            PREPARE,
            work / "corpus.csv",
            "--output-dir",
            corpus,
            "--smiles-column",
            "SMILES",
            "--descriptors",
            "--quiet",
        ],
        dict(os.environ),
    )
    run_job(
        [
            sys.executable,
            PREPARE,
            work / "held_out.csv",
            "--output-dir",
            held_out,
            "--smiles-column",
            "SMILES",
            "--descriptors",
            "--vocabulary-from",
            corpus,
            "--vocabulary",
            "fixed",
            "--quiet",
        ],
        dict(os.environ),
    )
    return corpus, held_out


def model_flags(args):
    """The encoder's sizes, alike for every pretraining run and every classifier."""
    embedding, d_model, layers = args.model
    return ["--embedding-dim", embedding, "--d-model", d_model, "--num-layers", layers]


def torchrun(script, *flags):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        script,
        *map(str, flags),
    ]


def pretrain(objective, corpus, held_out, args, work):
    """One pretraining run: its folder and its figures (metrics.json)."""
    output = work / f"pretrain-{objective}"
    started = time.perf_counter()
    run_job(
        torchrun(
            PRETRAIN,
            corpus,
            "--held-out",
            held_out,
            "--objective",
            objective,
            "--max-steps",
            args.steps,
            *model_flags(args),
            "--lr",
            "2e-3",
            "--lr-schedule",
            "cosine",
            "--warmup-epochs",
            "0.02",
            "--clip-grad-norm",
            "1.0",
            "--eval-molecules",
            HELD_OUT_MOLECULES,
            "--output-dir",
            output,
            "--quiet",
        ),
        dict(os.environ),
    )
    metrics = json.loads((output / "metrics.json").read_text())
    metrics["wall_seconds_with_start_up"] = time.perf_counter() - started
    print(f"pretrained {objective}: {summary(metrics)}", flush=True)
    return output, metrics


def summary(metrics):
    names = ("held_out_perplexity", "held_out_descriptor_mse", "tokens_per_second")
    return ", ".join(f"{name} {metrics[name]:.4g}" for name in names if name in metrics)


def fine_tune(arm, encoder, seed, args, work):
    """One classifier run on the fine-tuning data: its metrics.json."""
    output = work / f"fine-{arm}-{seed}"
    init = ["--init-from", encoder] if encoder else []
    run_job(
        torchrun(
            FINE_TUNE,
            args.data,
            *init,
            "--split",
            args.split,
            "--split-sizes",
            args.split_sizes,
            *model_flags(args),
            "--seed",
            seed,
            "--epochs",
            args.epochs,
            "--output-dir",
            output,
            "--quiet",
        ),
        dict(os.environ),
    )
    return json.loads((output / "metrics.json").read_text())


def arm_row(arm, runs):
    dev = [run["best_dev_roc_auc"] for run in runs]
    test = [run["test_roc_auc"] for run in runs]
    return dict(
        arm=arm,
        dev_mean=statistics.mean(dev),
        dev_sd=statistics.pstdev(dev),
        test_mean=statistics.mean(test),
        test_sd=statistics.pstdev(test),
        dev=dev,
        test=test,
        seconds=statistics.mean(run["wall_seconds"] for run in runs),
    )


def table(rows, args):
    lines = [
        f"Fine-tuned on {args.data.name}, {args.split} split {args.split_sizes}, canonical "
        f"SMILES, seeds {' '.join(map(str, args.seeds))}; ranked by best dev ROC AUC",
        "| start | dev ROC AUC | test ROC AUC | seconds a run |",
        "|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda row: -row["dev_mean"]):
        lines.append(
            f"| {row['arm']} | {row['dev_mean']:.3f} ± {row['dev_sd']:.3f} | "
            f"{row['test_mean']:.3f} ± {row['test_sd']:.3f} | {row['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(args):
    encoders = dict(spec.split("=", 1) for spec in args.encoder)
    pretrained = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus, held_out = prepare_slices(args, work) if args.objectives else (None, None)
        for objective in args.objectives:
            folder, pretrained[objective] = pretrain(objective, corpus, held_out, args, work)
            encoders[objective] = folder
        rows = []
        for arm, encoder in [("scratch", None), *encoders.items()]:
            runs = [fine_tune(arm, encoder, seed, args, work) for seed in args.seeds]
            rows.append(arm_row(arm, runs))
            print(f"fine-tuned from {arm}: dev {rows[-1]['dev']}", flush=True)
    print(table(rows, args))
    if args.output:
        command = "python benchmarks/pretraining_objectives.py " + " ".join(sys.argv[1:])
        args.output.write_text(
            json.dumps(dict(command=command, pretraining=pretrained, fine_tuning=rows), indent=1)
            + "\n"
        )


if __name__ == "__main__":
    main(build_parser().parse_args())
