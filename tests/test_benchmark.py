"""The benchmark runs end to end on a tiny setting; no timing is asserted."""
import json

import pytest

from conftest import SCRIPTS, run_script


@pytest.mark.timeout(300)
def test_tiny_benchmark_writes_its_report_and_plot(tmp_path, bbbp_subset):
    out = tmp_path / "docs"
    result = run_script([SCRIPTS / "benchmark.py", "--datasets", bbbp_subset, "--steps", "2", "--warmup", "1",
                         "--reference", "--reference-steps", "1", "--max-procs", "2", "--output-dir", out], timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    report = (out / "benchmarks.md").read_text()
    assert "| bbbp300.csv | tutorial | 1 x" in report and "| bbbp300.csv | partorch | 2 x 1 | 64 |" in report
    assert "| bbbp300.csv | partorch | 2 x 1 | 128 |" in report  # weak scaling: the batch of one process each
    assert (out / "benchmark_scaling.png").stat().st_size > 1000
    results = json.loads((out / "benchmarks.json").read_text())["results"]
    assert {(r["procs"], r["reference"]) for r in results} >= {(1, True), (1, False), (2, False)}
    assert all(r["samples"] > 0 and r["tokens"] > r["samples"] and len(r["peak_memory_mb"]) == r["procs"]
               for r in results)


@pytest.mark.timeout(200)
def test_tutorial_reference_trains_and_reports_a_test_auc(bbbp_subset):
    result = run_script([SCRIPTS / "tutorial_reference.py", bbbp_subset, "--epochs", "1"], timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    finals = [line for line in result.stdout.splitlines() if line.startswith("Final test ROC AUC: ")]
    assert len(finals) == 1 and 0.0 <= float(finals[0].split(": ")[1]) <= 1.0
