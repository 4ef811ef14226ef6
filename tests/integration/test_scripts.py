"""The two training scripts and the example, run for real: torchrun, processes, files."""

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time

from helpers import (
    DDP,
    EXAMPLE,
    FAST_FLAGS,
    FAULT_TOLERANT,
    ROOT,
    SINGLE,
    error_lines,
    final_lines,
    our_traceback,
    run_script,
    with_flag,
)
import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

METRIC_FIELDS = {
    "test_roc_auc",
    "best_dev_roc_auc",
    "best_epoch",
    "epochs_completed",
    "world_size",
    "global_batch_size",
    "train_samples_per_second",
    "wall_seconds",
    "task",
    "label_columns",
    "test_metrics",
}


def _event_files(output):
    return sorted(p.relative_to(output).as_posix() for p in output.rglob("events.out.tfevents.*"))


def _scalars(output):
    events = EventAccumulator(str(output))
    events.Reload()
    return events


def _hparams(output):
    """The flags TensorBoard's HParams tab shows for the run in `output`."""
    events = _scalars(output)
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    return plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams


@pytest.mark.timeout(300)
def test_ddp_script_under_torchrun_on_two_processes(bbbp_subset, tmp_path):
    # as users run it: no --output-dir (a new runs/ddp/version_N), output into a file, not a
    # terminal
    with open(tmp_path / "train.log", "w") as log:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                str(DDP),
                str(bbbp_subset),
                *FAST_FLAGS[:-1],
                "--test-every-epoch",
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=240,
        )
    text = (tmp_path / "train.log").read_text()
    assert done.returncode == 0, text[-3000:]
    assert "\r" not in text  # the progress bar is for terminals only
    assert [line.split()[2] for line in text.splitlines() if line.startswith("[rank0] epoch ")] == [
        "1/2",
        "2/2",
    ]
    finals = final_lines(text)
    assert len(finals) == 1
    out = tmp_path / "runs" / "ddp" / "version_0"
    metrics = json.loads((out / "metrics.json").read_text())
    assert METRIC_FIELDS <= metrics.keys() and metrics["task"] == "classification"
    assert metrics["world_size"] == 2 and metrics["global_batch_size"] == 32
    assert metrics["per_rank_batch_size"] == 16 and metrics["epochs_completed"] == 2
    assert f"{metrics['test_roc_auc']:.4f}" == finals[0].split(": ")[1]
    assert {
        "best_model.pt",
        "tokenizer.json",
        "hparams.json",
        "task.json",
        "roc_curve.png",
        "training_curves.png",
    } <= {p.name for p in out.iterdir()}
    # One writer, one run: curves and hparams in rank 0's one event file
    assert (
        _event_files(out) == [p.name for p in out.glob("events.out.tfevents.*")]
        and len(_event_files(out)) == 1
    )
    events = _scalars(out)
    for tag in ("Loss/train", "Loss/dev", "Loss/test", "ROC_AUC/dev", "ROC_AUC/test", "LR"):
        assert [e.step for e in events.Scalars(tag)] == [1, 2], tag
    steps = len(events.Scalars("Loss/train_step"))
    assert steps % 2 == 0 and steps // 2 >= 216 // 32, (
        steps
    )  # every step of both epochs (216 training molecules)
    assert [e.step for e in events.Scalars("Loss/train_step")] == list(range(1, steps + 1))
    assert "ROC/test" in events.Tags()["images"]
    saved = json.loads((out / "hparams.json").read_text())
    assert saved["smiles_form"] == "canonical" and saved["split_sizes"] == [
        0.72,
        0.18,
        0.1,
    ]  # the defaults
    splits = json.loads((out / "splits.json").read_text())
    assert (
        splits["split"] == "stratified"
        and len(splits["test"]) == metrics["test_metrics"]["molecules"]
    )
    hparams = _hparams(out)
    for flag in (
        "max_epochs",
        "patience",
        "sampler",
        "amp",
        "accumulate",
        "dataset",
        "label_column",
        "lr",
        "seed",
    ):
        assert flag in hparams, flag
    assert (
        hparams["label_column"].string_value == "p_np" and hparams["max_epochs"].number_value == 2
    )
    final = {
        tag: events.Scalars(tag)[-1].value
        for tag in ("hparam/test_roc_auc", "hparam/best_dev_roc_auc")
    }
    assert final["hparam/test_roc_auc"] == pytest.approx(metrics["test_roc_auc"])

    # a second run: its own folder; and without --test-every-epoch the test split is scored once, at
    # the end
    again = run_script([DDP, bbbp_subset, *FAST_FLAGS], nproc=2, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    second = tmp_path / "runs" / "ddp" / "version_1"
    tags = _scalars(second).Tags()["scalars"]
    assert "ROC_AUC/dev" in tags and "ROC_AUC/test" not in tags and "Loss/test" not in tags
    assert "ROC_AUC/test_at_best_epoch" in tags
    assert len(_event_files(out)) == 1  # the first run's folder untouched


@pytest.mark.timeout(120)
def test_the_progress_bar_is_drawn_on_a_terminal(bbbp_subset, tmp_path):
    """The other side of 'no bar in files': on a terminal it is there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(
        follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0)
    )  # a new pty is 0 columns wide
    process = subprocess.Popen(
        [
            sys.executable,
            str(SINGLE),
            bbbp_subset,
            "--output-dir",
            str(tmp_path / "run"),
            *FAST_FLAGS[:-1],
        ],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=ROOT,
    )
    os.close(follower)
    chunks = []
    while True:  # read while it runs: a full terminal buffer would block the writer
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    stdout, _ = process.communicate(timeout=100)
    terminal = b"".join(chunks).decode(errors="replace")
    assert process.returncode == 0, terminal[-2000:]
    assert "mol/s]\r" in terminal or "mol/s]\x1b" in terminal, terminal[-2000:]  # redrawn in place
    assert "\r" not in stdout.decode()


@pytest.mark.timeout(300)
def test_single_process_script_and_ddp_script_without_torchrun(bbbp_subset, tmp_path):
    for script, form, molecules in ((SINGLE, "raw", 300), (DDP, "canonical", 298)):
        out = tmp_path / script.stem
        result = run_script(
            [script, bbbp_subset, "--output-dir", out, "--smiles-form", form, *FAST_FLAGS]
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(final_lines(result.stdout)) == 1
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["world_size"] == 1 and 0.0 <= metrics["test_roc_auc"] <= 1.0
        assert json.loads((out / "hparams.json").read_text())["smiles_form"] == form
        # report.html: readable without TensorBoard, its figures inside it
        report = (out / "report.html").read_text()
        assert f">{metrics['test_roc_auc']:.4f}</td>" in report
        assert report.count('src="data:image/png;base64,iVBORw0KGgo') == 2  # curves and ROC
        # raw keeps the 2 rows RDKit cannot parse (rows 61 and 63); canonical drops them
        splits = json.loads((out / "splits.json").read_text())
        assert sorted(splits["train"] + splits["dev"] + splits["test"]) == [
            r for r in range(2, 302) if form == "raw" or r not in (61, 63)
        ]
        assert len(splits["train"] + splits["dev"] + splits["test"]) == molecules


@pytest.mark.timeout(400)
def test_several_tasks_with_missing_labels_score_the_mean_roc_auc(sider_subset, tmp_path):
    frame = pd.read_csv(sider_subset)
    columns = list(frame.columns[1:])
    out = tmp_path / "run"
    result = run_script(
        [
            DDP,
            sider_subset,
            "--label-column",
            ",".join(columns),
            "--output-dir",
            out,
            "--class-weight",
            "balanced",
            *FAST_FLAGS,
        ],
        nproc=2,
        timeout=380,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(final_lines(result.stdout)) == 1
    assert (
        "classification, 27 label columns; rank 0 of 2" in (out / "logs" / "rank0.log").read_text()
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["label_columns"] == columns and len(columns) == 27
    per_task = metrics["test_metrics"]["per_task"]
    scored = [m["roc_auc"] for m in per_task.values() if "roc_auc" in m]
    assert metrics["test_roc_auc"] == pytest.approx(sum(scored) / len(scored))
    assert metrics["test_metrics"]["tasks_scored"] == len(scored) >= 20
    # the gaps cut into the first columns are left out of that task's count
    assert (
        per_task[columns[0]]["molecules"] < per_task[columns[10]]["molecules"] == 40
    )  # the test split
    tags = _scalars(out).Tags()["scalars"]
    assert f"ROC_AUC/dev/{columns[0]}" in tags and "ROC_AUC/dev" in tags
    # --class-weight balanced: each column's positives weighted by its training negatives per
    # positive
    train = frame.iloc[[row - 2 for row in json.loads((out / "splits.json").read_text())["train"]]][
        columns
    ]
    assert json.loads((out / "task.json").read_text())["positive_weight"] == pytest.approx(
        list((train == 0).sum() / (train == 1).sum())
    )
    assert json.loads((out / "hparams.json").read_text())["class_weight"] == "balanced"


@pytest.mark.timeout(300)
def test_regression_reports_rmse_in_the_labels_units(esol_subset, tmp_path):
    out = tmp_path / "run"
    result = run_script(
        [DDP, esol_subset, "--label-column", "logSolubility", "--output-dir", out, *FAST_FLAGS],
        nproc=2,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    finals = final_lines(result.stdout, "RMSE")
    assert len(finals) == 1 and result.stdout.strip().splitlines()[-1] == finals[0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (
        metrics["task"] == "regression" and {"rmse", "mae", "r2"} <= metrics["test_metrics"].keys()
    )
    assert metrics["best_dev_rmse"] == min(
        h["dev_rmse"] for h in metrics["history"]
    )  # lowest is best
    task = json.loads((out / "task.json").read_text())
    train_labels = pd.read_csv(esol_subset)["logSolubility"]
    assert -4.5 < task["mean"][0] < -1.5 and abs(task["std"][0] - train_labels.std()) < 0.5
    assert "RMSE/dev" in _scalars(out).Tags()["scalars"] and (out / "parity.png").exists()


@pytest.mark.timeout(300)
def test_the_fingerprint_example_trains_under_torchrun(esol_path, tmp_path):
    out = tmp_path / "run"
    result = run_script(
        [
            EXAMPLE,
            esol_path,
            "--label-column",
            "logSolubility",
            "--output-dir",
            out,
            "--epochs",
            "3",
            "--quiet",
        ],
        nproc=2,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(final_lines(result.stdout, "RMSE")) == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert (
        metrics["world_size"] == 2
        and metrics["task"] == "regression"
        and metrics["epochs_completed"] == 3
    )
    assert metrics["test_rmse"] < 2.1  # the labels' own spread: it learned something
    hparams = json.loads((out / "hparams.json").read_text())
    assert hparams["model"]["inputs"] == 2048 and (out / "features.json").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rank, flags", [("0", []), ("1", ["--distributed-eval"])])
def test_a_failure_on_one_rank_while_scoring_stops_every_rank_at_once(
    bbbp_subset, tmp_path, rank, flags
):
    """Rank 0 scores dev while the others wait for its figures, or with --distributed-eval
    every rank scores a share: in the fault-tolerant rung one rank's failure is what all
    receive, not a silence until --dist-timeout or a mismatch of collectives."""
    slow = ROOT / "tests" / "integration" / "slow_evaluation.py"
    out = tmp_path / "o"
    started = time.time()
    result = run_script(
        [
            slow,
            FAULT_TOLERANT,
            bbbp_subset,
            "--output-dir",
            out,
            *FAST_FLAGS,
            *flags,
            "--dist-timeout",
            "600",
        ],
        nproc=2,
        timeout=100,
        env={"EVALUATION_ERROR": "dev cannot be scored", "EVALUATION_ERROR_RANK": rank},
    )
    assert result.returncode != 0
    errors = error_lines(result.stderr)
    expected = f"error: rank {rank} failed: dev cannot be scored"
    assert len(errors) == 2 and all(e == expected for e in errors), errors
    assert not our_traceback(result.stderr)
    assert time.time() - started < 90  # far below --dist-timeout


def test_the_example_refuses_flags_it_cannot_honour(bbbp_subset, tmp_path):
    """Fingerprints have no other writing: --augment and --tta are not the example's flags."""
    for flag in (["--augment"], ["--tta", "1"]):
        result = run_script(
            [EXAMPLE, bbbp_subset, "--output-dir", tmp_path / "o", *flag], timeout=60
        )
        assert result.returncode == 2 and f"unrecognized arguments: {flag[0]}" in result.stderr
        assert not (tmp_path / "o").exists()


@pytest.mark.timeout(120)
def test_bad_column_stops_every_rank_with_one_error_line(bbbp_subset, tmp_path):
    result = run_script(
        [DDP, bbbp_subset, "--label-column", "nope", "--output-dir", tmp_path / "o", *FAST_FLAGS],
        nproc=2,
        timeout=100,
    )
    assert result.returncode != 0
    errors = error_lines(result.stderr)
    assert len(errors) == 2 and all("no column 'nope'; the columns are" in e for e in errors)
    assert not our_traceback(result.stderr)
    assert not (tmp_path / "o").exists()


def test_the_tutorial_cites_the_ddp_steps_as_the_script_numbers_them():
    """docs/tutorial.md walks through the script by its `# DDP n` marks; keep them honest."""
    script = DDP.read_text()
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    cited = {int(n) for n in re.findall(r"\*\*DDP (\d)", tutorial)}
    assert cited == set(range(1, 9))
    for number in cited:
        assert f"# DDP {number}" in script, number


@pytest.mark.timeout(300)
def test_data_warnings_are_printed_once_not_once_per_rank(bbbp_subset, tmp_path):
    table = pd.read_csv(bbbp_subset)
    table.loc[5, "p_np"] = None  # a row without a label: dropped with a warning
    table.loc[len(table)] = {
        **table.loc[0].to_dict(),
        "p_np": 1 - table.loc[0, "p_np"],
    }  # same SMILES, other label
    path = tmp_path / "gaps.csv"
    table.to_csv(path, index=False)
    result = run_script(
        [DDP, path, "--output-dir", tmp_path / "run", *with_flag(FAST_FLAGS, "--epochs", 1)],
        nproc=2,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 4, warnings
    assert all(line.startswith("[rank0] warning: ") for line in warnings)
    for said in (
        "have no 'p_np' label",
        "RDKit cannot parse",
        "SMILES appear more than once",
        "different labels",
    ):
        assert sum(said in w for w in warnings) == 1, said
