"""What users of chemprop and Lightning reach for first, run for real: a run
repeated from its config.yaml, `--resume auto|latest`, SIGTERM preemption in
the fault-tolerant rung, learning-rate schedules and gradient clipping, and
multi-class classification."""

import json
import os
import shutil

from helpers import (
    DDP,
    FAST_FLAGS,
    FAULT_TOLERANT,
    ROOT,
    SCRIPTS,
    SINGLE,
    error_lines,
    final_lines,
    our_traceback,
    run_script,
    with_flag,
)
import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from partorch.ddp.checkpoint import load_state

SIGTERM_AT_STEP = ROOT / "tests" / "integration" / "sigterm_at_step.py"


def _history(folder, *keys):
    rows = json.loads((folder / "metrics.json").read_text())["history"]
    return [tuple(row[k] for k in keys) for row in rows]


def test_a_run_is_repeated_from_its_config_yaml(tmp_path, bbbp_subset):
    first, again = tmp_path / "first", tmp_path / "again"
    flags = [*with_flag(FAST_FLAGS, "--epochs", 1), "--lr-schedule", "cosine", "--seed", "7"]
    assert run_script([SINGLE, bbbp_subset, "--output-dir", first, *flags]).returncode == 0
    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert saved["dataset"] == str(bbbp_subset) and saved["seed"] == 7
    assert saved["lr-schedule"] == "cosine" and "output-dir" not in saved
    # the config alone: no dataset, no flag typed again
    config = ["--config", first / "config.yaml"]
    assert run_script([SINGLE, *config, "--output-dir", again]).returncode == 0
    assert _history(again, "dev_roc_auc") == _history(first, "dev_roc_auc")
    assert (again / "config.yaml").read_text() == (first / "config.yaml").read_text()
    # a flag on the command line overriding the file's value: unit/test_config.py


# Out of CI (marker slow). CI covers its core: --resume auto: the SIGTERM test below
@pytest.mark.slow
def test_resume_auto_or_latest_continues_a_run_on_its_schedule(tmp_path, bbbp_subset):
    out = tmp_path / "out"
    schedule = ["--lr-schedule", "cosine", "--warmup-epochs", "1", "--clip-grad-norm", "0.05"]
    auto = [SINGLE, bbbp_subset, "--output-dir", out, "--resume", "auto", *schedule]
    assert run_script([*auto, *with_flag(FAST_FLAGS, "--epochs", 1)]).returncode == 0  # starts
    assert load_state(out / "checkpoints" / "last.pt")["scheduler"]["last_epoch"] > 0
    assert run_script([*auto, *with_flag(FAST_FLAGS, "--epochs", 2)]).returncode == 0
    (first_epoch, first_lr), (second_epoch, second_lr) = _history(out, "epoch", "lr")
    assert (first_epoch, second_epoch) == (1, 2)  # epoch 1 not trained again
    # warmed up to --lr over epoch 1, the cosine (one epoch long, as the run began) then ends
    # at 0; a schedule started afresh on resume would be back at the top, 1e-3
    assert first_lr == pytest.approx(1e-3, rel=1e-6) and second_lr == pytest.approx(0, abs=1e-12)
    # the mean norm before clipping, above the limit: it cut in
    assert all(norm > 0.05 for (norm,) in _history(out, "grad_norm"))
    # --resume without a snapshot is an error; auto would have started
    empty = run_script([SINGLE, bbbp_subset, "--output-dir", tmp_path / "new", "--resume"])
    assert empty.returncode == 2 and "there is no snapshot" in error_lines(empty.stderr)[0]
    # latest: the highest-numbered unfinished run under runs/basic that has a snapshot
    runs = tmp_path / "runs" / "basic"
    shutil.copytree(out, runs / "version_3")
    (runs / "version_3" / "metrics.json").unlink()  # as if it had stopped after epoch 2
    shutil.copytree(out, runs / "version_5")  # newer, but finished: extended only by name
    (runs / "version_7").mkdir(parents=True)  # newer, but it never wrote a snapshot
    latest = run_script(
        [
            SINGLE,
            bbbp_subset,
            "--resume",
            "latest",
            *schedule,
            *with_flag(FAST_FLAGS, "--epochs", 3),
        ],
        cwd=tmp_path,
    )
    assert latest.returncode == 0, latest.stderr
    assert _history(runs / "version_3", "epoch") == [(1,), (2,), (3,)]
    assert _history(runs / "version_5", "epoch") == [(1,), (2,)]  # the finished one untouched
    both = run_script([SINGLE, bbbp_subset, "--resume", "latest", "--output-dir", out])
    assert both.returncode == 2 and "drop --output-dir" in both.stderr


@pytest.mark.timeout(400)
def test_sigterm_to_the_torchrun_agent_snapshots_the_step_and_the_same_command_goes_on(
    tmp_path, bbbp_subset
):
    """SLURM ends a job with SIGTERM to torchrun, which forwards it to its workers: they agree
    on a step, snapshot it and exit; the same command line continues from that step, and the
    run ends exactly as one that was never stopped."""
    flags = [*with_flag(FAST_FLAGS, "--batch-size", 8), "--threads", "1", "--resume", "auto"]
    flags += ["--num-workers", "1"]  # the signal reaches the loader's workers too
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert (
        run_script([FAULT_TOLERANT, bbbp_subset, *flags, "--output-dir", whole], nproc=2).returncode
        == 0
    )
    command = [SIGTERM_AT_STEP, FAULT_TOLERANT, bbbp_subset, *flags, "--output-dir", stopped]
    steps_per_epoch = _history(whole, "molecules")[0][0] // 8 + 1
    signal_step = steps_per_epoch + 13  # inside the second epoch
    first = run_script(command, nproc=2, env={"SIGTERM_AT_STEP": str(signal_step)})
    assert first.returncode != 0 and not (stopped / "metrics.json").exists()
    stops = [line for line in first.stderr.splitlines() if line.startswith("stopped on SIGTERM")]
    assert len(stops) == 2 and not our_traceback(first.stderr), first.stderr  # every rank, once
    paused = load_state(stopped / "checkpoints" / "last.pt")["state"]
    assert paused["epoch"] == 1 and paused["paused"]["epoch"] == 2
    assert 0 < paused["paused"]["step"] < steps_per_epoch  # the signal's step, not epoch 1's end
    assert f"at step {paused['paused']['step']} of epoch 2" in stops[0]
    again = run_script(command, nproc=2, env={"SIGTERM_AT_STEP": "0"})
    assert again.returncode == 0, again.stderr
    log = (stopped / "logs" / "rank0.log").read_text()
    assert f"resumed from the snapshot after step {paused['paused']['step']} of epoch 2" in log
    keys = ("epoch", "molecules", "dev_roc_auc", "dev_loss")
    assert _history(stopped, *keys) == _history(whole, *keys)
    got, want = (torch.load(f / "best_model.pt") for f in (stopped, whole))
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert os.path.exists(stopped / "config.yaml")


def test_a_three_class_csv_trains_under_torchrun_and_predicts_one_column_a_class(
    tmp_path, bbbp_subset
):
    frame = pd.read_csv(bbbp_subset)
    length = frame["smiles"].str.len()  # classes a SMILES reader can learn: short, middle, long
    frame["size"] = np.digitize(length, np.percentile(length, [33, 66]))
    data, out = tmp_path / "three.csv", tmp_path / "out"
    frame[["smiles", "size"]].to_csv(data, index=False)
    trained = run_script(
        [DDP, data, "--label-column", "size", "--output-dir", out, *FAST_FLAGS], nproc=2
    )
    assert trained.returncode == 0, trained.stderr
    assert len(final_lines(trained.stdout)) == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "multiclass" and set(metrics["test_metrics"]["per_class"]) == {
        "size_0",
        "size_1",
        "size_2",
    }
    assert final_lines(trained.stdout)[0].endswith(f"{metrics['test_roc_auc']:.4f}")
    predicted = run_script([SCRIPTS / "predict.py", out, data, "--output", tmp_path / "p.csv"])
    assert predicted.returncode == 0, predicted.stderr
    probabilities = pd.read_csv(tmp_path / "p.csv")
    assert list(probabilities.columns) == ["smiles", "size_0", "size_1", "size_2"]
    given = probabilities.dropna()
    assert len(given) >= len(frame) - 3  # BBBP's unparsable rows stay empty
    assert np.allclose(given[["size_0", "size_1", "size_2"]].sum(axis=1), 1.0)
