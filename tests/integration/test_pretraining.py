"""The large-data path for real: a corpus prepared by scripts/prepare_data.py, a masked-token
encoder pretrained on it under torchrun, a worker killed mid-epoch whose job resumes at its
step and trains on exactly the samples an uninterrupted run does, and a classifier fine-tuned
from the encoder with --init-from."""

import json

from helpers import (
    DDP,
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
import torch
import yaml

from partorch.ddp.checkpoint import load_state

PREPARE = ROOT / "scripts" / "prepare_data.py"
PRETRAIN = ROOT / "scripts" / "pretrain_ddp.py"
KILL = ROOT / "tests" / "integration" / "kill_at_step.py"
SIGTERM_AT_STEP = ROOT / "tests" / "integration" / "sigterm_at_step.py"
# A small encoder and a short run: 22 steps of 64 molecules (an epoch is 20), a snapshot every 4.
PRETRAIN_FLAGS = ["--embedding-dim", "16", "--d-model", "16", "--num-layers", "2"]
PRETRAIN_FLAGS += ["--epochs", "2", "--max-steps", "22"]
PRETRAIN_FLAGS += ["--batch-size", "64", "--eval-molecules", "100", "--log-every-steps", "5"]
PRETRAIN_FLAGS += ["--snapshot-every-steps", "4", "--eval-every-steps", "10", "--quiet"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, bbbp_path):
    """BBBP's SMILES without stereo marks and without labels, as a pretraining corpus
    (gzipped, column SMILES: MOSES's form; like MOSES, it lacks tokens such as [C@@H] that
    labelled sets hold), prepared by the script."""
    folder = tmp_path_factory.mktemp("corpus")
    source = folder / "corpus.csv.gz"
    smiles = pd.read_csv(bbbp_path)["smiles"]
    smiles = smiles[~smiles.str.contains("@")]
    smiles.rename("SMILES").to_csv(source, index=False)
    prepared = run_script([PREPARE, source, "--output-dir", folder / "prepared"], timeout=120)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    meta = json.loads((folder / "prepared" / "meta.json").read_text())
    assert f"{meta['molecules']:,} molecules" in prepared.stdout
    assert 0.99 * len(smiles) < meta["molecules"] <= len(smiles)  # a few do not parse
    return folder / "prepared"


@pytest.fixture(scope="module")
def encoder(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("pretrain") / "run"
    result = run_script([PRETRAIN, corpus, "--output-dir", out, *PRETRAIN_FLAGS], nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    finals = [line for line in result.stdout.splitlines() if line.startswith("Final held-out")]
    assert len(finals) == 1
    return out


def test_pretraining_writes_an_encoder_folder_and_its_figures(encoder):
    metrics = json.loads((encoder / "metrics.json").read_text())
    assert metrics["steps"] == 22 and metrics["epoch"] == 2 and metrics["world_size"] == 2
    assert metrics["tokens"] > 0 and metrics["tokens_per_second"] > 0
    first, last = metrics["history"][0], metrics["history"][-1]
    assert [row["step"] for row in metrics["history"]] == [10, 20, 22]
    assert last["loss"] < first["loss"]  # it learns: the held-out loss falls
    tokens = json.loads((encoder / "tokenizer.json").read_text())["tokens"]
    assert tokens[-1] == "<mask>" and json.loads((encoder / "hparams.json").read_text())["model"][
        "vocab_size"
    ] == len(tokens)
    assert list(encoder.glob("events.out.tfevents.*"))


def test_a_worker_killed_mid_epoch_resumes_at_its_step_on_the_same_samples(
    corpus, encoder, tmp_path
):
    out = tmp_path / "killed"
    result = run_script(
        [KILL, PRETRAIN, corpus, "--output-dir", out, *PRETRAIN_FLAGS],
        nproc=2,
        max_restarts=1,
        env={"KILL_RANK": "1", "KILL_AT_STEP": "10"},  # 2 steps after the snapshot at 8
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (out / "logs" / "rank0.log").read_text()
    assert "resumed from the snapshot after step 8 of epoch 1" in log
    resumed = json.loads((out / "metrics.json").read_text())
    whole = json.loads((encoder / "metrics.json").read_text())
    # every rank's digest of the token ids it trained on, step by step: the same sequence
    assert resumed["sample_digests"] == whole["sample_digests"]
    assert resumed["steps"] == whole["steps"] == 22
    assert resumed["held_out_loss"] == pytest.approx(whole["held_out_loss"], abs=1e-5)


# Out of CI (marker slow). CI covers its core:
# Preemption under torchrun: test_run_config's SIGTERM test
@pytest.mark.slow
def test_sigterm_stops_every_rank_after_one_step_and_the_same_command_goes_on(
    corpus, encoder, tmp_path
):
    """A preempted job: SIGTERM to the torchrun agent after step 7; the ranks check every 5
    steps, so both stop after step 10 with a snapshot there, and the same command line then
    trains on exactly the samples an uninterrupted run does."""
    out = tmp_path / "stopped"
    command = [SIGTERM_AT_STEP, PRETRAIN, corpus, "--output-dir", out, *PRETRAIN_FLAGS]
    command += ["--resume", "auto"]
    first = run_script(command, nproc=2, env={"SIGTERM_AT_STEP": "7"})
    assert first.returncode != 0 and not (out / "metrics.json").exists()
    stops = [line for line in first.stderr.splitlines() if line.startswith("stopped on SIGTERM")]
    assert len(stops) == 2 and not our_traceback(first.stderr), first.stderr  # every rank, once
    assert "after step 10 of epoch 1 (step 10 of the run)" in stops[0]
    paused = load_state(out / "checkpoints" / "last.pt")["state"]
    assert (paused["epoch"], paused["step"], paused["global_step"]) == (1, 10, 10)
    again = run_script(command, nproc=2, env={"SIGTERM_AT_STEP": "0"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        "resumed from the snapshot after step 10 of epoch 1"
        in (out / "logs" / "rank0.log").read_text()
    )
    resumed = json.loads((out / "metrics.json").read_text())
    whole = json.loads((encoder / "metrics.json").read_text())
    assert resumed["sample_digests"] == whole["sample_digests"]
    assert resumed["held_out_loss"] == pytest.approx(whole["held_out_loss"], abs=1e-5)


def test_fine_tuning_from_the_encoder_takes_its_weights_sizes_and_vocabulary(
    encoder, bbbp_subset, tmp_path
):
    out = tmp_path / "fine"
    flags = [*FAST_FLAGS, "--freeze-pretrained-epochs", "1", "--pretrained-lr-scale", "0.1"]
    result = run_script(
        [DDP, bbbp_subset, "--init-from", encoder, *flags, "--output-dir", out], nproc=2
    )
    assert result.returncode == 0, result.stderr[-3000:]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert (config["freeze-pretrained-epochs"], config["pretrained-lr-scale"]) == (1, 0.1)
    assert len(final_lines(result.stdout)) == 1
    assert "molecules hold tokens the pretrained encoder never saw" in result.stderr
    model = json.loads((out / "hparams.json").read_text())["model"]
    assert (model["d_model"], model["num_layers"]) == (16, 2)  # the encoder's, not FAST_FLAGS'
    pretrained = json.loads((encoder / "tokenizer.json").read_text())["tokens"]
    tokens = json.loads((out / "tokenizer.json").read_text())["tokens"]
    assert tokens[: len(pretrained)] == pretrained


@pytest.mark.timeout(400)
def test_a_fine_tuning_run_at_two_rates_resumed_after_sigterm_ends_as_an_unbroken_one(
    encoder, bbbp_subset, tmp_path
):
    """The optimizer's second group (the encoder's rate) is built again on resume, so the
    snapshot's Adam moments load into it and the run goes on exactly."""
    flags = [*with_flag(FAST_FLAGS, "--batch-size", 8), "--threads", "1", "--resume", "auto"]
    flags += ["--init-from", encoder, "--pretrained-lr-scale", "0.1"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    done = run_script([FAULT_TOLERANT, bbbp_subset, *flags, "--output-dir", whole], nproc=2)
    assert done.returncode == 0, done.stderr[-3000:]
    command = [SIGTERM_AT_STEP, FAULT_TOLERANT, bbbp_subset, *flags, "--output-dir", stopped]
    molecules = json.loads((whole / "metrics.json").read_text())["history"][0]["molecules"]
    inside_epoch_2 = molecules // 8 + 3  # steps of one rank's batches of 8, and 3 more
    first = run_script(command, nproc=2, env={"SIGTERM_AT_STEP": str(inside_epoch_2)})
    assert first.returncode != 0 and not (stopped / "metrics.json").exists()
    assert load_state(stopped / "checkpoints" / "last.pt")["state"]["paused"]["epoch"] == 2
    again = run_script(command, nproc=2, env={"SIGTERM_AT_STEP": "0"})
    assert again.returncode == 0, again.stderr[-3000:]
    got, want = (load_state(folder / "best_model.pt") for folder in (stopped, whole))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_a_vocabulary_that_cannot_extend_the_encoder_s_is_one_clear_error(encoder, bbbp_subset):
    result = run_script(
        [SINGLE, bbbp_subset, "--init-from", encoder, "--tokenizer", "bytes", *FAST_FLAGS]
    )
    assert result.returncode != 0
    assert error_lines(result.stderr) == [
        "error: the bytes tokenizer's vocabulary is fixed: it cannot extend a pretrained "
        "encoder's (use --tokenizer smiles with --init-from)"
    ]
    assert "Traceback" not in result.stderr


def test_init_from_a_folder_that_holds_no_encoder_is_one_clear_error(bbbp_subset, tmp_path):
    result = run_script([SINGLE, bbbp_subset, "--init-from", tmp_path, *FAST_FLAGS])
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(error_lines(result.stderr)) == 1
    assert f"--init-from {tmp_path}: not a pretrained encoder's folder" in result.stderr


def test_the_pretraining_script_prepares_a_csv_itself_into_the_cache(bbbp_subset, tmp_path):
    env = {"PARTORCH_CACHE": str(tmp_path / "cache")}
    flags = [*with_flag(PRETRAIN_FLAGS, "--max-steps", 2), "--output-dir", tmp_path / "run"]
    result = run_script([PRETRAIN, bbbp_subset, *flags], nproc=2, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    folders = [p for p in (tmp_path / "cache" / "prepared").iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1
    assert json.loads((folders[0] / "meta.json").read_text())["molecules"] == 298
    logs = [(tmp_path / "run" / "logs" / f"rank{r}.log").read_text() for r in (0, 1)]
    # one process of the node built it; the other waited for it and found it built
    assert sum("start-up: prepared" in log for log in logs) == 1
    assert sum("prepared corpus is up to date" in log for log in logs) == 1


def test_the_descriptor_objective_learns_from_a_corpus_prepared_with_descriptors(
    corpus, bbbp_subset, tmp_path
):
    described = tmp_path / "described"
    prepared = run_script([PREPARE, bbbp_subset, "--output-dir", described, "--descriptors"])
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert "15 descriptors" in prepared.stdout
    # 4 steps an epoch of the 250 molecules trained on; held-out figures at 4, 8 and 12; a
    # high rate, for the held-out error to fall within so few steps
    flags = with_flag(with_flag(PRETRAIN_FLAGS, "--epochs", 3), "--max-steps", 12)
    flags = [*with_flag(flags, "--eval-every-steps", 4), "--eval-molecules", "50", "--lr", "0.01"]
    out = tmp_path / "run"
    result = run_script(
        [PRETRAIN, described, "--objective", "both", "--output-dir", out, *flags], nproc=2
    )
    assert result.returncode == 0, result.stderr[-3000:]
    finals = [line for line in result.stdout.splitlines() if line.startswith("Final held-out")]
    assert [line.split(":")[0] for line in finals] == [
        "Final held-out perplexity",
        "Final held-out descriptor MSE",
    ]
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert history[-1]["descriptor_mse"] < history[0]["descriptor_mse"]  # it learns
    # a corpus prepared without descriptors: one clear line, on every rank
    refused = run_script(
        [PRETRAIN, corpus, "--objective", "descriptors", "--output-dir", out, *flags], nproc=2
    )
    assert refused.returncode != 0 and not our_traceback(refused.stderr)
    assert error_lines(refused.stderr) == 2 * [
        f"error: {corpus}: prepared without descriptors; prepare it with --descriptors"
    ]


def test_a_bare_clone_fine_tunes_from_the_shipped_encoder(bbbp_subset, tmp_path):
    shipped = ROOT / "models" / "moses_descriptors"
    out = tmp_path / "fine"
    result = run_script(
        [SINGLE, bbbp_subset, "--init-from", shipped, *FAST_FLAGS, "--output-dir", out]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(final_lines(result.stdout)) == 1
    model = json.loads((out / "hparams.json").read_text())["model"]
    shipped_model = json.loads((shipped / "hparams.json").read_text())["model"]
    sizes = ("embedding_dim", "d_model", "num_layers", "bidirectional")
    assert [model[k] for k in sizes] == [shipped_model[k] for k in sizes]
    pretrained = json.loads((shipped / "tokenizer.json").read_text())["tokens"]
    tokens = json.loads((out / "tokenizer.json").read_text())["tokens"]
    assert tokens[: len(pretrained)] == pretrained and len(tokens) > len(pretrained)
