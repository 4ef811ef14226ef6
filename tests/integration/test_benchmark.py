"""The benchmark runs end to end on a tiny setting; no timing is asserted."""

import importlib.util
import json
import os
import sys

from helpers import BENCHMARKS, run_script
import pytest

pytestmark = pytest.mark.slow


def load_benchmark_module():
    spec = importlib.util.spec_from_file_location("benchmark", BENCHMARKS / "speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(420)
def test_tiny_benchmark_writes_its_report_and_plot(tmp_path, bbbp_subset):
    out = tmp_path / "docs"
    result = run_script(
        [
            BENCHMARKS / "speed.py",
            "--datasets",
            bbbp_subset,
            "--steps",
            "2",
            "--warmup",
            "1",
            "--reference",
            "--reference-steps",
            "1",
            "--max-procs",
            "2",
            "--output-dir",
            out,
        ],
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    report = (out / "benchmarks.md").read_text()
    assert (
        "| bbbp300.csv | tutorial | 1 x" in report
        and "| bbbp300.csv | partorch | 2 x 1 | 64 |" in report
    )
    assert (
        "| bbbp300.csv | partorch | 2 x 1 | 128 |" in report
    )  # weak scaling: the batch of one process each
    assert (
        "| bbbp300.csv | partorch | 1 x 1 | 32 |" in report
    )  # one process at the batch each of two gets
    assert (
        "| bbbp300.csv | independent | 2 x 1 | 64 |" in report
    )  # the control: no gradient exchange
    assert (
        "| bbbp300.csv | layer-by-layer | 2 x 1 | 64 |" in report
    )  # the LSTM path before the fused call
    assert (
        "- bbbp300.csv: 2 DDP processes at global batch 64 run" in report
        and "independent processes" in report
    )
    assert (out / "benchmark_scaling.png").stat().st_size > 1000
    results = json.loads((out / "benchmarks.json").read_text())["results"]
    assert {(r["procs"], r["loop"]) for r in results} >= {
        (1, "tutorial"),
        (1, "partorch"),
        (2, "partorch"),
        (2, "independent"),
    }
    assert all(
        r["samples"] > 0 and r["tokens"] > r["samples"] and len(r["peak_memory_mb"]) == r["procs"]
        for r in results
    )


@pytest.mark.timeout(500)
def test_lightning_side_by_side_trains_both_and_reports_them(tmp_path, bbbp_subset):
    """--lightning: Lightning's DDP and partorch's DDP script, whole epochs each, in one report."""
    if importlib.util.find_spec("lightning") is None:
        pytest.skip(
            "PyTorch Lightning is not installed "
            "(the optional bench extra: pip install -e '.[bench]')"
        )
    out = tmp_path / "docs"
    result = run_script(
        [
            BENCHMARKS / "speed.py",
            "--datasets",
            bbbp_subset,
            "--steps",
            "1",
            "--warmup",
            "1",
            "--max-procs",
            "2",
            "--lightning",
            "--lightning-epochs",
            "2",
            "--output-dir",
            out,
        ],
        timeout=480,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    comparison = json.loads((out / "benchmarks.json").read_text())["lightning"]
    for loop in ("lightning", "partorch"):
        assert (
            comparison[loop]["samples_per_second"] > 0
            and 0.0 <= comparison[loop]["test_roc_auc"] <= 1.0
        )
        assert len(comparison[loop]["dev_curve"]) == 2  # one dev score per epoch
    report = (out / "benchmarks.md").read_text()
    assert (
        "| PyTorch Lightning |" in report and "| partorch (basic_neural_network_ddp.py) |" in report
    )


@pytest.mark.timeout(200)
def test_tutorial_reference_trains_and_reports_a_test_auc(bbbp_subset):
    result = run_script(
        [BENCHMARKS / "tutorial_reference.py", bbbp_subset, "--epochs", "1", "--num-workers", "0"],
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    finals = [
        line for line in result.stdout.splitlines() if line.startswith("Final test ROC AUC: ")
    ]
    assert len(finals) == 1 and 0.0 <= float(finals[0].split(": ")[1]) <= 1.0


def test_a_failed_job_stops_the_benchmark_once_with_both_ends_of_its_log(tmp_path):
    """No retry, not even after a signal: the abort that once asked for one
    has its cause fixed (partorch.ddp.distributed.exit_without_teardown)."""
    benchmark = load_benchmark_module()
    counter = tmp_path / "attempts"
    code = (
        f"import pathlib, sys; p = pathlib.Path({str(counter)!r}); "
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); "
        "sys.stderr.write('worker line\\n' + 'filler\\n' * 1000 + '  exitcode  : -6 (pid: 1)\\n'); "
        "sys.exit(1)"
    )
    with pytest.raises(SystemExit, match="benchmark job failed") as failure:
        benchmark.run_job([sys.executable, "-c", code], dict(os.environ))
    assert counter.read_text() == "x"  # run once
    assert "worker line" in str(failure.value) and "exitcode  : -6" in str(failure.value)
    assert "[...]" in str(failure.value)  # a long log: its two ends
