"""DDP pitfalls, each checked in real processes under torchrun (gloo, CPU)."""

import json
import re
import sys

from helpers import (
    DDP,
    FAST_FLAGS,
    FAULT_TOLERANT,
    ROOT,
    SINGLE,
    error_lines,
    our_traceback,
    run_command,
    run_script,
    with_flag,
)
import pandas as pd
import pytest
import torch

WORKER = ROOT / "tests" / "integration" / "ddp_worker.py"
PER_RANK_FLAGS = ROOT / "tests" / "integration" / "per_rank_flags.py"
SMALL_POOLS = ROOT / "tests" / "integration" / "small_pools.py"
# No dropout (the only randomness that differs between 1 and N processes), no early stop.
PARITY_FLAGS = with_flag(with_flag(FAST_FLAGS, "--dropout", 0), "--patience", 0) + ["--lr", "0.01"]


def run_worker(mode, out, nproc, *options, expect_ok=True):
    out.mkdir(parents=True, exist_ok=True)
    result = run_script([WORKER, mode, out, *options], nproc=nproc, timeout=120)
    if expect_ok:
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)], result
    return None, result


@pytest.mark.timeout(150)
def test_sampler_fresh_each_epoch_same_per_seed_and_covering(tmp_path):
    first, _ = run_worker(
        "sampler_orders", tmp_path / "a", 2, "--count", "101", "--batch-size", "8"
    )
    again, _ = run_worker(
        "sampler_orders", tmp_path / "b", 2, "--count", "101", "--batch-size", "8"
    )
    assert first == again  # same seed: same order, every time
    for rank in first:
        assert rank["orders"]["1"] != rank["orders"]["2"]  # set_epoch took effect
    for epoch in ("1", "2"):
        seen = [i for rank in first for batch in rank["orders"][epoch] for i in batch]
        assert sorted(seen) == list(range(101))  # every molecule once, no padding duplicates
        assert len(first[0]["orders"][epoch]) == len(first[1]["orders"][epoch])


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nproc, n, batch_size", [(2, 1001, 32), (3, 1001, 33), (3, 5, 6)])
def test_uneven_shards_finish_with_equal_step_counts(tmp_path, nproc, n, batch_size):
    ranks, _ = run_worker(
        "uneven_training", tmp_path, nproc, "--count", str(n), "--batch-size", str(batch_size)
    )
    assert len({json.dumps(r["steps"]) for r in ranks}) == 1
    assert all(r["samples"] == n for r in ranks)  # reduced over ranks: the whole split, once
    assert len({r["loss"] for r in ranks}) == 1  # the same aggregated loss on every rank
    # every step's loss, summed over ranks: one value a step, the same on every rank, averaging to
    # the epoch's
    assert len({json.dumps(r["step_losses"]) for r in ranks}) == 1
    assert len(ranks[0]["step_losses"]) == ranks[0]["steps"][-1]


def _last_weights(out):
    return torch.load(out / "checkpoints" / "last.pt", weights_only=True)["model"]


def _train(script, data, out, nproc, *flags):
    result = run_script(
        [script, data, "--output-dir", out, *PARITY_FLAGS, *flags], nproc=nproc, timeout=280
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "metrics.json").read_text())


def _assert_parity(tmp_path, data, *flags, accumulate=False):
    """The single-process script, and the DDP script on 2 ranks (and, with `accumulate`, with
    2 micro-batches a step), end with the same weights to 1e-5."""
    one = _train(SINGLE, data, tmp_path / "one", None, *flags)
    runs = {"two": _train(DDP, data, tmp_path / "two", 2, *flags)}
    if accumulate:  # the loss's scaling does not depend on the task: one data set shows it
        runs["two_acc"] = _train(DDP, data, tmp_path / "two_acc", 2, "--accumulate", "2", *flags)
    two = runs["two"]
    assert one["world_size"] == 1 and two["world_size"] == 2 and two["per_rank_batch_size"] == 16
    reference = _last_weights(tmp_path / "one")
    for run, metrics in runs.items():
        weights = _last_weights(tmp_path / run)
        for name, value in reference.items():
            assert torch.allclose(value, weights[name], atol=1e-5, rtol=0), (run, name)
        assert [h["train_loss"] for h in metrics["history"]] == pytest.approx(
            [h["train_loss"] for h in one["history"]], abs=1e-5
        )
    return one


@pytest.mark.timeout(600)
def test_two_ranks_take_the_same_steps_as_one_process_augmentation_included(tmp_path, bbbp_subset):
    # random SMILES are drawn per molecule, not per rank: the same strings whatever the world size
    assert (
        _assert_parity(tmp_path, bbbp_subset, "--augment", "--tta", "1", accumulate=True)["task"]
        == "classification"
    )


# Out of CI (marker slow). CI covers its core:
# parity: the regression test; missing labels: test_scripts
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_parity_holds_for_several_tasks_with_missing_labels(tmp_path, sider_subset):
    columns = list(pd.read_csv(sider_subset).columns[1:])
    one = _assert_parity(tmp_path, sider_subset, "--label-column", ",".join(columns))
    assert one["label_columns"] == columns and one["test_metrics"]["tasks_scored"] >= 20


@pytest.mark.timeout(600)
def test_parity_holds_for_regression(tmp_path, esol_subset):
    one = _assert_parity(tmp_path, esol_subset, "--label-column", "logSolubility")
    assert one["task"] == "regression" and "test_rmse" in one


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, bbbp_subset):
    """(folder, metrics) of the DDP rung on 2 ranks with PARITY_FLAGS: a reference that two
    tests share."""
    folder = tmp_path_factory.mktemp("two_ranks") / "run"
    return folder, _train(DDP, bbbp_subset, folder, 2)


@pytest.mark.timeout(400)
def test_rank0_and_distributed_evaluation_give_the_same_scores(tmp_path, bbbp_subset, two_ranks):
    """Rank 0 scoring whole splits, or every rank its share gathered: the
    same molecules scored once each, the same AUC as one process."""
    runs = {"rank0": two_ranks[1]}
    for name, nproc, flags in (("one", None, []), ("shared", 2, ["--distributed-eval"])):
        script = SINGLE if nproc is None else FAULT_TOLERANT
        runs[name] = _train(script, bbbp_subset, tmp_path / name, nproc, *flags)
    test_size = runs["one"]["test_metrics"]["molecules"]
    assert test_size == 30
    for name in ("rank0", "shared"):
        assert runs[name]["test_metrics"]["molecules"] == test_size
        assert runs[name]["test_roc_auc"] == pytest.approx(runs["one"]["test_roc_auc"], abs=1e-6)
    dev = {name: [h["dev_roc_auc"] for h in run["history"]] for name, run in runs.items()}
    assert dev["rank0"] == dev["shared"]
    # torch's DistributedSampler pads shards with repeats: fine for training, never for scoring
    padded = _train(
        FAULT_TOLERANT,
        bbbp_subset,
        tmp_path / "random",
        4,
        "--distributed-eval",
        "--sampler",
        "random",
    )
    assert padded["test_metrics"]["molecules"] == test_size


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "change, named", [("smiles", "molecules"), ("label", "molecules"), ("tokenizer", "vocabulary")]
)
def test_ranks_with_different_data_stop_with_one_clear_error(tmp_path, bbbp_subset, change, named):
    frame = pd.read_csv(bbbp_subset)
    frame.to_csv(tmp_path / "data0.csv", index=False)
    if change == "smiles":
        frame.loc[0, "smiles"] = frame.loc[0, "smiles"] + "[Se]"  # a token only rank 1 sees
    if change == "label":  # only a label: the split (random) and the vocabulary stay the same
        frame.loc[3, "p_np"] = 1 - frame.loc[3, "p_np"]
    frame.to_csv(tmp_path / "data1.csv", index=False)
    rank1_flags = "--split random" + (" --tokenizer bytes" if change == "tokenizer" else "")
    _, result = run_worker(
        "start_up_digest",
        tmp_path / "out",
        2,
        "--csv",
        tmp_path / "dataRANK.csv",
        "--flags",
        "--split random",
        "--rank1-flags",
        rank1_flags,
        expect_ok=False,
    )
    assert result.returncode != 0
    errors = error_lines(result.stderr)
    assert len(errors) == 2 and all(f"ranks disagree on the {named} (" in e for e in errors), (
        result.stderr
    )


@pytest.mark.timeout(300)
def test_same_seed_gives_identical_metrics_the_second_run_from_the_cache(tmp_path, bbbp_subset):
    runs, cache = [], {"PARTORCH_CACHE": str(tmp_path / "cache")}
    for name in ("a", "b"):
        out = tmp_path / name
        flags = [DDP, bbbp_subset, "--output-dir", out, *FAST_FLAGS]
        result = run_script(flags, nproc=2, env=cache)
        assert result.returncode == 0, result.stderr[-3000:]
        logs = [(out / "logs" / f"rank{rank}.log").read_text() for rank in (0, 1)]
        # one rank computes the canonical SMILES, once for both runs
        computed = [" canonical SMILES into " in log for log in logs]
        read = [" canonical SMILES from " in log for log in logs]
        assert sum(computed) == (name == "a") and sum(read) == 2 - sum(computed), logs
        metrics = json.loads((out / "metrics.json").read_text())
        runs.append(
            {k: metrics[k] for k in ("test_roc_auc", "best_dev_roc_auc", "best_epoch")}
            | {"losses": [h["train_loss"] for h in metrics["history"]]}
        )
        rng = torch.load(out / "checkpoints" / "last.pt", weights_only=True)["rng"]
        runs[-1]["dropout streams"] = [state["torch"].tolist() for state in rng]
    assert runs[0] == runs[1]  # the same seed: the same run, dropout masks included
    first_rank, second_rank = runs[0]["dropout streams"]
    assert first_rank != second_rank  # seeded from (seed, rank): each rank draws its own masks


@pytest.mark.timeout(400)
def test_pools_of_processes_give_the_start_up_one_process_gives(tmp_path, bbbp_subset):
    """Canonical SMILES, scaffolds, descriptors and Morgan counts, each over a pool of
    processes spawned by a torchrun rank (as on any set of 20,000 molecules or more)."""
    runs = []
    for launcher in ([], [SMALL_POOLS]):
        out = tmp_path / ("pooled" if launcher else "alone")
        flags = [*launcher, DDP, bbbp_subset, "--output-dir", out, *FAST_FLAGS]
        flags += ["--split", "scaffold", "--extra-features", "rdkit2d+morgan"]
        result = run_script(flags, nproc=2, env={"PARTORCH_CACHE": str(out) + "-cache"})
        assert result.returncode == 0, result.stderr[-3000:]
        logs = "".join((out / "logs" / f"rank{rank}.log").read_text() for rank in (0, 1))
        pools = re.findall(r"\] INFO (.+): over a pool of 2 processes", logs)
        history = json.loads((out / "metrics.json").read_text())["history"]
        runs.append(
            {
                "pools": sorted(pools),  # one rank computes, the other reads the cache
                "splits": (out / "splits.json").read_text(),
                "features": (out / "extra_features.json").read_text(),
                "epochs": [(h["train_loss"], h["dev_roc_auc"]) for h in history],
            }
        )
    alone, pooled = runs
    assert alone.pop("pools") == []
    expected = ["Morgan counts", "canonical SMILES", "rdkit2d descriptors", "scaffolds"]
    assert pooled.pop("pools") == expected
    assert pooled == alone and len(alone["epochs"]) == 2


UNGUARDED = """
import sys
from partorch.molecules import chunked
from partorch.molecules.chem import canonical_smiles

print("the script's work", flush=True)
chunked.pool_cores = lambda: 2
print(chunked.joined(canonical_smiles, sys.argv[1:], description="d", chunk=2, least=0))
"""


@pytest.mark.timeout(120)
def test_a_script_without_a_main_guard_runs_its_work_once_beside_a_pool(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    result = run_command([sys.executable, script, "OCC", "c1ccccc1O", "C(C)O"], timeout=100)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["the script's work", "['CCO', 'Oc1ccccc1', 'CCO']"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flag, value", [("--lr", "0.01"), ("--epochs", "3")])
def test_ranks_started_with_different_flags_stop_before_training(
    tmp_path, bbbp_subset, flag, value
):
    out = tmp_path / "run"
    result = run_script(
        [PER_RANK_FLAGS, FAULT_TOLERANT, bbbp_subset, "--output-dir", out, *FAST_FLAGS],
        nproc=2,
        env={"RANK_1_FLAGS": f"{flag} {value}"},
        timeout=100,
    )
    errors = error_lines(result.stderr)
    assert result.returncode != 0 and len(errors) == 2, result.stderr[-2000:]
    assert all(f"ranks disagree on the flag {flag} (ranks [0]: " in e for e in errors), errors
    assert not our_traceback(result.stderr)
    assert not out.exists()  # stopped before the output folder


# Out of CI (marker slow). CI covers its core:
# resuming: test_restarts' killed worker and resumed run
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_resuming_on_another_number_of_ranks_continues_the_same_run(
    tmp_path, bbbp_subset, two_ranks
):
    """Two ranks for an epoch, then --resume on one process: the same global
    batches, in the same order, to the same weights as two ranks throughout
    (no dropout: the only stream that is per rank)."""
    interrupted = tmp_path / "interrupted"
    _train(DDP, bbbp_subset, interrupted, 2, "--epochs", "1")
    result = run_script(
        [DDP, bbbp_subset, "--output-dir", interrupted, "--resume", *PARITY_FLAGS],
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the snapshot was written by 2 ranks and this job has 1" in result.stderr
    resumed = json.loads((interrupted / "metrics.json").read_text())
    throughout_folder, throughout = two_ranks
    assert resumed["world_size"] == 1 and resumed["epochs_completed"] == 2
    assert [h["train_loss"] for h in resumed["history"]] == pytest.approx(
        [h["train_loss"] for h in throughout["history"]], abs=1e-5
    )
    reference = _last_weights(throughout_folder)
    for name, value in _last_weights(interrupted).items():
        assert torch.allclose(value, reference[name], atol=1e-5, rtol=0), name
