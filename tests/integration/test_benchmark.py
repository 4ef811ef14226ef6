"""The benchmark runs end to end on a tiny setting; no timing is asserted."""

import importlib.util
import json
import os
import sys

from helpers import BENCHMARKS, load_module, run_script
import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]


def load_benchmark_module():
    return load_module(BENCHMARKS / "speed.py")


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
    has its cause fixed (partorch.ddp.errors.exit_without_teardown)."""
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


@pytest.mark.timeout(300)
def test_large_data_benchmark_reports_preparing_startup_and_throughput(tmp_path, bbbp_path):
    """--large alone: preparing, start-up (prepared and cold CSV) and throughput, all parsed
    from real runs, on one tiny data set (HIV x10's copy is checked below, in-process)."""
    tiny = tmp_path / "bbbp50.csv"
    lines = bbbp_path.read_text().splitlines(keepends=True)
    tiny.write_text("".join(lines[:51]))  # the header and 50 rows
    out = tmp_path / "docs"
    flags = ["--large-repeats", "1", "--large-prepare-repeats", "2", "--large-steps", "2"]
    flags += ["--large-batch-size", "32"]
    flags += ["--large-model", "8", "8", "1", "--large-eval-molecules", "20"]
    result = run_script(
        [BENCHMARKS / "speed.py", "--large", "--large-datasets", f"BBBP={tiny}", *flags]
        + ["--output-dir", out],
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    assert not (out / "benchmarks.md").exists()  # --large alone: only the large case
    report = (out / "large_data.md").read_text()
    figures = json.loads((out / "large_data.json").read_text())
    assert figures["cpu"] and f"Machine: {figures['cpu']}, {os.cpu_count()} cores." in report
    (prepared,) = figures["prepared"]
    assert prepared["name"] == "BBBP" and prepared["molecules"] == 50 and prepared["tokens"] > 0
    assert prepared["prepare_seconds"] > 0 and prepared["wall_seconds"] > 0
    # the largest corpus (the only one here) is prepared twice, each time anew: their median
    runs = prepared["prepare_runs"]
    assert len(runs) == 2 and prepared["prepare_seconds"] == pytest.approx(sum(runs) / 2)
    assert figures["figures"]["prepare_seconds"] == prepared["prepare_seconds"]
    assert f"- Preparing BBBP: {prepared['prepare_seconds']:.1f} s (target at most 180 s" in report
    (row,) = figures["startup"]
    assert row["prepared_seconds"] > 0 and row["csv_seconds"] > 0
    assert row["prepared_uss_mb"] > 0 and row["csv_uss_mb"] > 0
    assert [r["ranks"] for r in row["prepared_runs"]] == [2]  # both ranks logged their first step
    assert f"| BBBP | 50 | {row['prepared_seconds']:.2f} |" in report
    speeds = figures["throughput"]
    assert [(s["name"], s["procs"], s["threads"]) for s in speeds] == [
        ("BBBP", 1, 1),
        ("BBBP", 1, os.cpu_count()),
        ("BBBP", 2, 1),
    ]
    assert all(s["tokens_per_second"] > 0 and 0 < s["mfu"] for s in speeds)
    assert figures["figures"]["speedup"] > 0 and figures["figures"]["speedup_same_cores"] > 0
    lines = ("- Speed-up, 2 x 1 against 1 x 1 (each process alike): ", "- MFU, 2 x 1: ")
    lines += (f"- Speed-up at equal cores, 2 x 1 against 1 x {os.cpu_count()}: ",)
    for line in lines:
        assert line in report


def test_the_cpu_is_described_by_name_family_model_and_widest_vector_unit(tmp_path):
    speed = load_benchmark_module()
    cpuinfo = tmp_path / "cpuinfo"
    core = "model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 17\nflags\t\t: fpu avx2 {}\n\n"
    cpuinfo.write_text(core.format("avx512f") * 2)  # one block per core: the first is read
    assert speed.cpu_description(cpuinfo) == "AMD EPYC (family 25, model 17, avx512f)"
    cpuinfo.write_text(core.format("fma"))
    assert speed.cpu_description(cpuinfo) == "AMD EPYC (family 25, model 17, avx2)"
    assert speed.cpu_description(tmp_path / "absent")  # elsewhere: platform's word, or "?"


def test_the_large_case_adds_hiv_ten_times_over_after_hiv(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # large_data imports speed's helpers
    large_data = load_module(BENCHMARKS / "large_data.py")
    hiv = tmp_path / "HIV.csv"
    hiv.write_text("smiles,HIV_active\nCCO,0\nCCN,1")  # no newline at the end
    rows = large_data.with_repeats([("BBBP", tmp_path / "b.csv"), ("HIV", hiv)], tmp_path)
    assert [name for name, _, _ in rows] == ["BBBP", "HIV", "HIVx10"]
    copy = rows[2][1].read_text().splitlines()
    assert copy[0] == "smiles,HIV_active" and copy[1:] == ["CCO,0", "CCN,1"] * 10


def test_the_mfu_target_judges_one_thread_a_process_and_not_one_process_on_every_core(
    monkeypatch,
):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    large_data = load_module(BENCHMARKS / "large_data.py")
    speed = dict(procs=2, threads=1, mfu=0.59)
    assert large_data.mfu_line(speed) == "- MFU, 2 x 1: 59.0 % (target 60 %): **not met**."
    assert large_data.mfu_line({**speed, "mfu": 0.61}).endswith("(target 60 %): met.")
    alone_on_every_core = large_data.mfu_line(dict(procs=1, threads=2, mfu=0.51))
    assert alone_on_every_core.startswith("- MFU, 1 x 2: 51.0 % (one process on every core")
    assert "target" not in alone_on_every_core.replace("no target", "")


@pytest.mark.timeout(400)
def test_the_objective_comparison_pretrains_and_fine_tunes_on_a_tiny_setting(
    tmp_path, bbbp_path, bbbp_subset
):
    corpus = tmp_path / "corpus.csv"  # MOSES's form: a SMILES column, no stereo marks
    smiles = pd.read_csv(bbbp_path)["smiles"]
    smiles[~smiles.str.contains("@")].rename("SMILES").to_csv(corpus, index=False)
    out = tmp_path / "objectives.json"
    flags = ["--molecules", "300", "--steps", "3", "--seeds", "0", "--epochs", "2"]
    flags += ["--objectives", "descriptors", "--data", bbbp_subset, "--split", "stratified"]
    result = run_script(
        [BENCHMARKS / "pretraining_objectives.py", corpus, corpus, *flags, "--output", out],
        timeout=360,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert list(figures["pretraining"]) == ["descriptors"]
    assert figures["pretraining"]["descriptors"]["held_out_descriptor_mse"] > 0
    rows = {row["arm"]: row for row in figures["fine_tuning"]}
    assert sorted(rows) == ["descriptors", "scratch"]
    assert all(len(row["dev"]) == 1 and 0 < row["dev"][0] <= 1 for row in rows.values())
    assert "| start | dev ROC AUC | test ROC AUC | seconds a run |" in result.stdout


def test_the_features_benchmark_times_every_kind_the_pool_and_the_cache(bbbp_subset):
    result = run_script(
        [BENCHMARKS / "features.py", bbbp_subset, "--molecules", "40", "--repeats", "1"]
        + ["--pool-min", "0", "--pool-chunk", "10"],
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    kinds = [line.split(" | ")[0].strip("| ") for line in result.stdout.splitlines()[3:8]]
    assert kinds == ["rdkit2d", "morgan", "rdkit2d+morgan", "rdkit2d-full", "rdkit2d-full+morgan"]
    assert "bbbp300.csv: 40 molecules" in result.stdout
    assert "; a pool of 2 processes " in result.stdout  # 4 tasks, on this machine's 2 cores
    assert "; read from the cache " in result.stdout


@pytest.mark.timeout(300)
def test_the_startup_benchmark_times_each_phase_with_and_without_the_cache(bbbp_subset):
    result = run_script(
        [BENCHMARKS / "startup.py", bbbp_subset, "--repeats", "1"]
        + ["--extra-features", "rdkit2d+morgan"],
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    phases = [line.split(" | ")[0].strip("| ") for line in result.stdout.splitlines()[3:-2]]
    assert phases[1:3] == ["canonical SMILES for 300 molecules", "scaffold split"], phases
    assert phases[-1] == "all of start-up" and len(phases) == 7, phases
    cached = "read from the cache: canonical SMILES, scaffolds, descriptors, Morgan counts"
    assert cached in result.stdout
