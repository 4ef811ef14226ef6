"""One worker of the parallel Optuna search in 03_parallel_experiments.ipynb.

    python notebooks/optuna_trial.py --storage sqlite:///optuna_study.db --study-name bbbp-rnn \
        --data bbbp_subset.csv --n-trials 4 --worker 0

Start several at once: each loads the same study from the SQLite file, asks it
for parameters, trains, and reports the dev score back. The workers never talk
to each other; the database is all they share. Each trial is one real, short
training run of scripts/basic_neural_network.py in a process of its own, with
one CPU thread, in OUTPUT/trial_<number>. Remove OUTPUT along with the
database to start a study afresh: the training script refuses to write a new
run into a folder that holds an earlier one (trial numbers start at 0 again).
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys

import optuna

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "scripts" / "basic_neural_network.py"


def storage(url):
    """The study's database. SQLite lets one writer in at a time: a process that
    finds it locked waits up to 30 s for its turn instead of failing the trial."""
    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 30}})


def make_objective(args):
    def objective(trial):
        # The search space: small models, so a trial takes seconds on one thread.
        lr = trial.suggest_float("lr", 3e-4, 1e-2, log=True)
        dropout = trial.suggest_float("dropout", 0.0, 0.4)
        d_model = trial.suggest_categorical("d_model", [16, 32, 64])
        output = (
            Path(args.output) / f"trial_{trial.number}"
        )  # trial numbers are unique in the study
        command = [
            sys.executable,
            str(TRAIN),
            args.data,
            "--output-dir",
            str(output),
            "--threads",
            "1",
            "--quiet",
            "--epochs",
            str(args.epochs),
            "--seed",
            str(args.seed),
            "--embedding-dim",
            "32",
            "--d-model",
            str(d_model),
            "--num-layers",
            "1",
            "--lr",
            str(lr),
            "--dropout",
            str(dropout),
        ]
        trial.set_user_attr("worker", args.worker)
        trial.set_user_attr("output_dir", str(output))
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"trial {trial.number}: training failed ({done.returncode}):\n{done.stderr[-2000:]}"
            )
        metrics = json.loads((output / "metrics.json").read_text())
        # The test score is kept for display only: the search must never see it.
        trial.set_user_attr("test_roc_auc", metrics["test_roc_auc"])
        trial.set_user_attr("best_epoch", metrics["best_epoch"])
        return metrics["best_dev_roc_auc"]  # the study maximises the dev score

    return objective


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--storage", required=True, help="database URL, e.g. sqlite:///optuna_study.db"
    )
    parser.add_argument("--study-name", required=True)
    parser.add_argument("--data", required=True, help="CSV file to train on")
    parser.add_argument("--n-trials", type=int, required=True, help="trials this worker runs")
    parser.add_argument(
        "--worker", type=int, default=0, help="this worker's number (seeds its sampler)"
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--seed", type=int, default=1729, help="training seed: the same split in every trial"
    )
    parser.add_argument("--sampler-seed", type=int, default=0)
    parser.add_argument(
        "--startup-trials", type=int, default=4, help="random trials before TPE models the rest"
    )
    parser.add_argument("--output", default="runs/optuna")
    args = parser.parse_args(argv)
    # The sampler is not stored in the database: each worker brings its own. Its
    # own seed, so two workers do not propose the same first points; constant_liar
    # counts the trials still running elsewhere as bad, so workers spread out.
    sampler = optuna.samplers.TPESampler(
        seed=args.sampler_seed + args.worker,
        n_startup_trials=args.startup_trials,
        constant_liar=True,
    )
    study = optuna.load_study(
        study_name=args.study_name, storage=storage(args.storage), sampler=sampler
    )
    print(f"worker {args.worker} (pid {os.getpid()}): {args.n_trials} trials", flush=True)
    study.optimize(make_objective(args), n_trials=args.n_trials)


if __name__ == "__main__":
    main()
