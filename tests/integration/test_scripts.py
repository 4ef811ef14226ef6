"""The two training scripts, run for real: torchrun, processes, files."""
import json

import pytest

from conftest import FAST_FLAGS, SCRIPTS, run_script

DDP = SCRIPTS / "basic_neural_network_ddp.py"
SINGLE = SCRIPTS / "basic_neural_network.py"
METRIC_FIELDS = {"test_roc_auc", "best_dev_roc_auc", "best_epoch", "epochs_completed", "world_size",
                 "global_batch_size", "train_samples_per_second", "wall_seconds"}


def _final_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("Final test ROC AUC: ")]


def _our_traceback(stderr):
    """Traceback frames from our code (torchrun's own failure report is allowed)."""
    return [line for line in stderr.splitlines()
            if line.strip().startswith("File ") and ("partorch/" in line or "scripts/" in line)]


def _event_files(output):
    return sorted(p.relative_to(output).as_posix() for p in output.rglob("events.out.tfevents.*"))


@pytest.mark.timeout(300)
def test_ddp_script_under_torchrun_on_two_processes(bbbp_subset, tmp_path):
    out = tmp_path / "run"
    result = run_script([DDP, bbbp_subset, "--output-dir", out, *FAST_FLAGS], nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    finals = _final_lines(result.stdout)
    assert len(finals) == 1 and result.stdout.strip().splitlines()[-1] == finals[0]
    auc = float(finals[0].split(": ")[1])
    metrics = json.loads((out / "metrics.json").read_text())
    assert METRIC_FIELDS <= metrics.keys()
    assert metrics["world_size"] == 2 and metrics["global_batch_size"] == 32
    assert metrics["per_rank_batch_size"] == 16 and metrics["epochs_completed"] == 2
    assert round(metrics["test_roc_auc"], 4) == auc
    # One writer: rank 0's scalars file, and the hparams run it added.
    events = _event_files(out)
    assert len(events) == 2 and sum(e.startswith("hparams/") for e in events) == 1, events
    assert {"best_model.pt", "tokenizer.json", "hparams.json", "roc_curve.png", "training_curves.png"} <= {
        p.name for p in out.iterdir()}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(out))
    events.Reload()
    for tag in ("Loss/train", "Loss/dev", "Loss/test", "ROC_AUC/dev", "ROC_AUC/test", "LR"):
        assert [e.step for e in events.Scalars(tag)] == [1, 2], tag
    assert "ROC/test" in events.Tags()["images"]


@pytest.mark.timeout(300)
def test_single_process_script_and_ddp_script_without_torchrun(bbbp_subset, tmp_path):
    for script in (SINGLE, DDP):
        out = tmp_path / script.stem
        result = run_script([script, bbbp_subset, "--output-dir", out, *FAST_FLAGS])
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(_final_lines(result.stdout)) == 1
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["world_size"] == 1 and 0.0 <= metrics["test_roc_auc"] <= 1.0


@pytest.mark.timeout(120)
def test_bad_column_stops_every_rank_with_one_error_line(bbbp_subset, tmp_path):
    result = run_script([DDP, bbbp_subset, "--label-column", "nope", "--output-dir", tmp_path / "o", *FAST_FLAGS],
                        nproc=2, timeout=100)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and all("no column 'nope'; the columns are" in e for e in errors)
    assert not _our_traceback(result.stderr)
    assert not (tmp_path / "o").exists()


def test_tutorial_line_references_point_at_the_right_lines():
    """docs/tutorial.md cites lines of the DDP script; keep them honest."""
    import re
    from conftest import ROOT
    lines = DDP.read_text().splitlines()
    expected = {26: "setup_distributed", 28: "set_cpu_threads", 29: "seed_everything", 30: "prepare_data",
                31: "verify_same_data_on_all_ranks", 35: "get_ddp_dataloader", 41: "prepare_output_dir",
                45: "DistributedDataParallel(", 48: "SummaryWriter", 51: "train(", 56: "load_state_dict"}
    cited = {int(n) for n in re.findall(r"\(lines? (\d+)", (ROOT / "docs" / "tutorial.md").read_text())}
    assert cited <= set(expected) | {37, 56}, cited - set(expected)
    for number, text in expected.items():
        assert text in lines[number - 1], (number, lines[number - 1])
