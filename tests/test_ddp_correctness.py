"""DDP pitfalls, each checked in real processes under torchrun (gloo, CPU)."""
import json

import pandas as pd
import pytest
import torch

from conftest import ROOT, FAST_FLAGS, SCRIPTS, run_script

WORKER = ROOT / "tests" / "ddp_worker.py"


def run_worker(mode, out, nproc, *options, expect_ok=True):
    out.mkdir(parents=True, exist_ok=True)
    result = run_script([WORKER, mode, out, *options], nproc=nproc, timeout=120)
    if expect_ok:
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)], result
    return None, result


@pytest.mark.timeout(150)
def test_sampler_fresh_each_epoch_same_per_seed_and_covering(tmp_path):
    first, _ = run_worker("sampler_orders", tmp_path / "a", 2, "--count", "101", "--batch-size", "8")
    again, _ = run_worker("sampler_orders", tmp_path / "b", 2, "--count", "101", "--batch-size", "8")
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
    ranks, _ = run_worker("uneven_training", tmp_path, nproc, "--count", str(n), "--batch-size", str(batch_size))
    assert len({json.dumps(r["steps"]) for r in ranks}) == 1
    assert all(r["samples"] == n for r in ranks)  # reduced over ranks: the whole split, once
    assert len({r["loss"] for r in ranks}) == 1  # the same aggregated loss on every rank


@pytest.mark.timeout(300)
def test_two_ranks_take_the_same_steps_as_one_process(tmp_path):
    options = ["--count", "100", "--batch-size", "16", "--epochs", "2"]
    one, _ = run_worker("parity", tmp_path, 1, *options)
    two, _ = run_worker("parity", tmp_path, 2, *options)
    two_accumulating, _ = run_worker("parity", tmp_path, 2, *options, "--accumulate", "2")
    assert one[0]["steps"] == two[0]["steps"] == 12  # 6 full batches an epoch; the 4 left over join the last
    single = torch.load(tmp_path / "params_world1_acc1.pt", weights_only=True)
    for other in ("params_world2_acc1.pt", "params_world2_acc2.pt"):
        double = torch.load(tmp_path / other, weights_only=True)
        for name, value in single.items():
            assert torch.allclose(value, double[name], atol=1e-5, rtol=0), (other, name)


@pytest.mark.timeout(150)
def test_every_molecule_scored_once_and_auc_equals_single_process(tmp_path, bbbp_subset):
    single, _ = run_worker("evaluation", tmp_path / "one", 1, "--csv", bbbp_subset)
    double, _ = run_worker("evaluation", tmp_path / "two", 2, "--csv", bbbp_subset)
    for split in ("dev", "test"):
        reference = single[0][split]["master"]
        assert single[0][split]["sharded"] == reference
        for rank in double:
            assert rank[split]["master"] == reference and rank[split]["sharded"] == reference
        sizes = [r[split]["shard_size"] for r in double]
        assert sum(sizes) == single[0][split]["shard_size"] and min(sizes) > 0


@pytest.mark.timeout(120)
def test_ranks_with_different_data_stop_with_one_clear_error(tmp_path, bbbp_subset):
    frame = pd.read_csv(bbbp_subset)
    frame.to_csv(tmp_path / "data0.csv", index=False)
    frame.loc[0, "smiles"] = frame.loc[0, "smiles"] + "[Se]"  # a token only rank 1 sees
    frame.to_csv(tmp_path / "data1.csv", index=False)
    _, result = run_worker("start_up_digest", tmp_path / "out", 2, "--csv", tmp_path / "dataRANK.csv",
                           expect_ok=False)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and all("the vocabulary differs between ranks" in e for e in errors), result.stderr


@pytest.mark.timeout(300)
def test_same_seed_gives_identical_metrics(tmp_path, bbbp_subset):
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = run_script([SCRIPTS / "basic_neural_network_ddp.py", bbbp_subset, "--output-dir", out,
                             *FAST_FLAGS], nproc=2)
        assert result.returncode == 0, result.stderr[-3000:]
        metrics = json.loads((out / "metrics.json").read_text())
        runs.append({k: metrics[k] for k in ("test_roc_auc", "best_dev_roc_auc", "best_epoch")}
                    | {"losses": [h["train_loss"] for h in metrics["history"]]})
        assert (out / "logs" / "rank0.log").exists() and (out / "logs" / "rank1.log").exists()
    assert runs[0] == runs[1]
