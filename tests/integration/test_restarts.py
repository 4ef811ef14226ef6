"""Snapshots, resume, a killed worker, a hung peer, an unwritable folder, predict."""

import json
import os
import signal
import subprocess
import sys
import time

from helpers import (
    DDP,
    FAST_FLAGS,
    FAULT_TOLERANT,
    ROOT,
    SCRIPTS,
    SINGLE,
    error_lines,
    free_port,
    our_traceback,
    run_command,
    run_script,
    with_flag,
)
import numpy as np
import pandas as pd
import pytest
import torch

from partorch.ddp.checkpoint import load_model_dir, load_state
from partorch.molecules.inference import predict_smiles


def _metrics(out):
    m = json.loads((out / "metrics.json").read_text())
    return {
        k: m[k] for k in ("test_roc_auc", "best_dev_roc_auc", "best_epoch", "epochs_completed")
    } | {"history": [(h["epoch"], h["train_loss"], h["dev_roc_auc"]) for h in m["history"]]}


def _flags(epochs):
    return with_flag(FAST_FLAGS, "--epochs", epochs)


@pytest.mark.timeout(400)
def test_resumed_run_ends_like_an_uninterrupted_one(tmp_path, bbbp_subset):
    full, part = tmp_path / "full", tmp_path / "part"
    assert run_script([DDP, bbbp_subset, "--output-dir", full, *_flags(3)], nproc=2).returncode == 0
    assert run_script([DDP, bbbp_subset, "--output-dir", part, *_flags(1)], nproc=2).returncode == 0
    snapshot_path = part / "checkpoints" / "last.pt"
    snapshot = load_state(snapshot_path)
    assert (
        0
        < snapshot["state"]["seconds"]
        <= json.loads((part / "metrics.json").read_text())["wall_seconds"]
    )
    snapshot["state"]["seconds"] += 1000  # as if the first attempt had taken 1000 s longer
    torch.save(snapshot, snapshot_path)
    earlier = snapshot["state"]["seconds"]
    resume_started = time.perf_counter()
    resumed = run_script([DDP, bbbp_subset, "--output-dir", part, *_flags(3), "--resume"], nproc=2)
    resume_seconds = time.perf_counter() - resume_started
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _metrics(full) == _metrics(part)
    # a resumed run's wall clock counts its earlier attempts: the accuracy report's minutes per run
    # use it
    wall = json.loads((part / "metrics.json").read_text())["wall_seconds"]
    assert earlier < wall < earlier + resume_seconds
    a, b = (torch.load(d / "best_model.pt", weights_only=True) for d in (full, part))
    assert all(torch.equal(a[k], b[k]) for k in a)
    snapshot = load_state(snapshot_path)
    assert snapshot["state"]["epoch"] == 3 and len(snapshot["rng"]) == 2


# Out of CI (marker slow). CI covers its core:
# a run's identity: test_a_new_run_in_a_folder_holding_an_earlier_one
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_snapshot_of_another_run_is_refused_not_resumed(tmp_path, bbbp_subset):
    out = tmp_path / "run"
    assert (
        run_script(
            [DDP, bbbp_subset, "--output-dir", out, *_flags(1), "--seed", "1"], nproc=2
        ).returncode
        == 0
    )
    other = run_script(
        [
            DDP,
            bbbp_subset,
            "--output-dir",
            out,
            *_flags(3),
            "--seed",
            "2",
            "--lr",
            "0.01",
            "--resume",
        ],
        nproc=2,
    )
    assert other.returncode != 0
    errors = error_lines(other.stderr)
    assert len(errors) == 2 and all("the snapshot belongs to another run" in e for e in errors), (
        other.stderr[-2000:]
    )
    assert (
        "hparams.lr: snapshot 0.001, this run 0.01; hparams.seed: snapshot 1, this run 2"
        in errors[0]
    )
    assert (
        json.loads((out / "metrics.json").read_text())["seed"] == 1
    )  # the first run's results are untouched


@pytest.mark.timeout(300)
def test_a_new_run_in_a_folder_holding_an_earlier_one_is_refused_not_mixed(tmp_path, bbbp_subset):
    out = tmp_path / "run"
    assert run_script([DDP, bbbp_subset, "--output-dir", out, *_flags(1)], nproc=2).returncode == 0
    before = (out / "metrics.json").read_bytes(), (out / "checkpoints" / "last.pt").read_bytes()
    for script, nproc in (
        (DDP, 2),
        (SINGLE, None),
    ):  # the same flags, but a new job: neither continues the old
        again = run_script([script, bbbp_subset, "--output-dir", out, *_flags(2)], nproc=nproc)
        assert again.returncode != 0
        errors = error_lines(again.stderr)
        assert (
            len(errors) == (nproc or 1)
            and "holds an earlier run" in errors[0]
            and "--resume" in errors[0]
        )
        assert (
            (out / "metrics.json").read_bytes(),
            (out / "checkpoints" / "last.pt").read_bytes(),
        ) == before
    # a finished model whose snapshots were deleted (or that was copied without them) is
    # still a run: refused before anything is written, no log and no event file added
    for snapshot in (out / "checkpoints").iterdir():
        snapshot.unlink()
    before = _contents(out)
    again = run_script([SINGLE, bbbp_subset, "--output-dir", out, *_flags(1)])
    assert error_lines(again.stderr) == [
        f"error: {out} holds an earlier run (a finished model): continue it with --resume, or "
        "choose another --output-dir"
    ]
    assert _contents(out) == before


def _contents(folder):
    """Every file under `folder` with its bytes and modification time."""
    return {
        p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# Out of CI (marker slow). CI covers its core:
# a folder's first run: test_a_new_run_in_a_folder_holding_an_earlier_one
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_jobs_never_write_one_folder_and_a_dead_job_s_lock_is_no_obstacle(
    tmp_path, bbbp_subset
):
    out, marker = tmp_path / "run", tmp_path / "evaluating"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "SLOW_EVALUATION_SECONDS": "8",
        "SLOW_EVALUATION_MARKER": str(marker),
    }
    slow = ROOT / "tests" / "integration" / "slow_evaluation.py"
    first = subprocess.Popen(
        [sys.executable, slow, SINGLE, bbbp_subset, "--output-dir", out, *_flags(3)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert marker.exists(), "the first job never reached its evaluation"
        second = run_script([SINGLE, bbbp_subset, "--output-dir", out, "--resume", *_flags(3)])
        errors = error_lines(second.stderr)
        assert len(errors) == 1 and f"{out} is in use by another job (pid {first.pid}" in errors[0]
        snapshot = out / "checkpoints" / "last.pt"
        while not snapshot.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert first.poll() is None, "the first job ended before it could be killed"
    finally:
        first.kill()  # SIGKILL: its lock file stays behind, but the kernel has let go of the lock
        first.communicate()
    assert (out / ".lock").exists()
    resumed = run_script([SINGLE, bbbp_subset, "--output-dir", out, "--resume", *_flags(2)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["epochs_completed"] == 2


# Out of CI (marker slow). CI covers its core:
# a run's identity: test_a_new_run_in_a_folder_holding_an_earlier_one
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_new_job_that_reuses_an_rdzv_id_does_not_continue_the_old_one(tmp_path, bbbp_subset):
    out = tmp_path / "run"

    def job(epochs):
        launch = [
            "-m",
            "torch.distributed.run",
            "--nnodes=1",
            "--nproc-per-node=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            "--rdzv-id=nightly",  # the same id, as a job script run every night would give
        ]
        return run_command(
            [sys.executable, *launch, DDP, bbbp_subset, "--output-dir", out, *_flags(epochs)],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    assert job(1).returncode == 0
    for finished in ("metrics.json", "best_model.pt"):  # as if it had died after its snapshot
        (out / finished).unlink()
    snapshot = (out / "checkpoints" / "last.pt").read_bytes()
    again = job(2)
    errors = error_lines(again.stderr)
    assert again.returncode != 0 and len(errors) == 2, again.stderr[-2000:]
    assert all("holds an earlier run" in e and "--resume" in e for e in errors)
    assert (out / "checkpoints" / "last.pt").read_bytes() == snapshot


@pytest.mark.timeout(400)
def test_killed_worker_restarts_and_resumes(tmp_path, bbbp_subset):
    # the usage line's form (a fixed port, no --output-dir): the restart must find the job's own
    # version_N
    out = tmp_path / "runs" / "ddp" / "version_0"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--master-port={free_port()}",
        "--nproc-per-node=2",
        "--max-restarts=1",
        str(DDP),
        str(bbbp_subset),
        *_flags(6),
    ]
    agent = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    snapshot = out / "checkpoints" / "last.pt"
    deadline = time.time() + 200
    while not snapshot.exists() and time.time() < deadline and agent.poll() is None:
        time.sleep(0.2)
    assert snapshot.exists(), "no snapshot was written"
    workers = subprocess.run(
        ["pgrep", "-P", str(agent.pid)], capture_output=True, text=True
    ).stdout.split()
    assert len(workers) == 2
    os.kill(int(workers[-1]), signal.SIGKILL)
    stdout, stderr = agent.communicate(timeout=300)
    assert agent.returncode == 0, stderr[-3000:]
    assert stdout.count("Final test ROC AUC:") == 1
    log = (out / "logs" / "rank0.log").read_text()
    assert "resumed from the snapshot after epoch" in log
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs_completed"] == 6 and [h["epoch"] for h in metrics["history"]] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert [p.name for p in out.parent.iterdir()] == ["version_0"]


@pytest.mark.faults  # injected (a peer that hangs), as the rest of the fault suite
@pytest.mark.timeout(120)
def test_hung_peer_ends_the_job_within_the_timeout(tmp_path):
    started = time.time()
    result = run_script(
        [
            ROOT / "tests" / "integration" / "ddp_worker.py",
            "peer_hangs",
            tmp_path,
            "--timeout",
            "5",
        ],
        nproc=2,
        timeout=100,
    )
    assert result.returncode != 0 and time.time() - started < 90
    assert "error: lost contact with another process" in result.stderr


@pytest.mark.timeout(120)
def test_unwritable_output_folder_is_reported_before_training(tmp_path, bbbp_subset):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = run_script(
        [DDP, bbbp_subset, "--output-dir", blocker / "out", *FAST_FLAGS], nproc=2, timeout=100
    )
    assert result.returncode != 0
    errors = error_lines(result.stderr)
    assert len(errors) == 2 and all("is not writable" in e for e in errors)
    assert "epoch 1" not in result.stderr


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, bbbp_subset):
    out = tmp_path_factory.mktemp("trained") / "run"
    flags = ["--output-dir", out, "--tokenizer", "bytes", *FAST_FLAGS]
    assert run_script([SINGLE, bbbp_subset, *flags]).returncode == 0
    return out


@pytest.mark.timeout(200)
def test_predict_matches_the_model_and_reports_bad_rows(tmp_path, trained_run, bbbp_subset):
    from rdkit import Chem

    out = trained_run
    molecules = pd.read_csv(bbbp_subset).head(40)
    molecules.loc[5, "smiles"] = "CCé"  # not a molecule
    molecules.loc[6, "smiles"], molecules.loc[7, "smiles"] = (
        "C1=CC=CC=C1O",
        "Oc1ccccc1",
    )  # phenol, two styles
    molecules.to_csv(tmp_path / "in.csv", index=False)
    result = run_script(
        [SCRIPTS / "predict.py", out, tmp_path / "in.csv", "--output", tmp_path / "p.csv"]
    )
    assert result.returncode == 0, result.stderr
    assert "row 7: RDKit cannot parse 'CCé'" in result.stderr
    predicted = pd.read_csv(tmp_path / "p.csv")
    assert list(predicted.columns) == [
        "smiles",
        "p_np",
    ]  # one column per task, named after its label
    assert list(predicted["smiles"]) == list(molecules["smiles"])
    model, descriptions = load_model_dir(
        out, lambda d: __import__("partorch").RNNPredictor(**d["hparams"]["model"])
    )
    assert descriptions["hparams"]["smiles_form"] == "canonical"
    from partorch.molecules.tokenizer import tokenizer_from_dict

    tokenizer = tokenizer_from_dict(descriptions["tokenizer"])
    with torch.no_grad():
        for i in (0, 1, 17, 39):  # the model reads what it was trained on: canonical SMILES
            ids = torch.tensor(
                [tokenizer.encode(Chem.MolToSmiles(Chem.MolFromSmiles(molecules["smiles"][i])))]
            )
            own = torch.sigmoid(model(ids, torch.tensor([ids.shape[1]]))).item()
            assert abs(predicted["p_np"][i] - own) < 1e-5
    assert np.isnan(predicted["p_np"][5])
    assert (
        predicted["p_np"][6] == predicted["p_np"][7]
    )  # one molecule, one prediction, whatever the style
    assert predict_smiles(model, tokenizer, ["CCO", "", "CCé"], "cpu")[1] == [
        (1, "empty SMILES"),
        (2, "unknown tokens ['é'] in 'CCé'"),
    ]
    outputs, failures = predict_smiles(
        model, tokenizer, ["C1CC", "C1=CC=CC=C1O"], "cpu", smiles_form="canonical"
    )
    assert failures == [(0, "RDKit cannot parse 'C1CC'")] and outputs[1, 0] == pytest.approx(
        np.log(predicted["p_np"][7] / (1 - predicted["p_np"][7])), abs=1e-4
    )  # phenol's logit, as predict.py gave


@pytest.mark.timeout(200)
def test_predict_checks_its_folders_and_output_before_any_work(tmp_path, trained_run):
    trailing = tmp_path / "trailing.csv"
    trailing.write_text("smiles,p_np\nCCO,1,\nc1ccccc1,0,\n")  # pandas alone: SMILES as index
    read = run_script([SCRIPTS / "predict.py", trained_run, trailing])
    assert read.returncode == 0, read.stderr
    assert [line.split(",")[0] for line in read.stdout.splitlines()] == [
        "smiles",
        "CCO",
        "c1ccccc1",
    ]

    not_a_run = tmp_path / "logs_only"
    not_a_run.mkdir()
    (not_a_run / "metrics.json").write_text("{}")
    other_model = tmp_path / "fingerprint_run"
    other_model.mkdir()
    for path in trained_run.iterdir():
        if path.is_file():
            (other_model / path.name).write_bytes(path.read_bytes())
    hparams = json.loads((other_model / "hparams.json").read_text())
    hparams["model"] = {"fingerprint_bits": 2048, "hidden": 256}
    (other_model / "hparams.json").write_text(json.dumps(hparams))
    kept = tmp_path / "kept.csv"
    kept.write_text("an earlier file\n")
    expected = {
        not_a_run: f"error: {not_a_run}: not a saved model folder (it has no best_model.pt)",
        other_model: f"error: {other_model}: its model is not the SMILES network this script "
        "rebuilds (hparams.json's model arguments are ['fingerprint_bits', 'hidden'])",
    }
    for folder, line in expected.items():
        result = run_script([SCRIPTS / "predict.py", folder, trailing, "--output", kept])
        assert result.returncode == 2 and error_lines(result.stderr) == [line], result.stderr
        assert kept.read_text() == "an earlier file\n"
    to_folder = run_script([SCRIPTS / "predict.py", trained_run, trailing, "--output", tmp_path])
    assert error_lines(to_folder.stderr) == [
        f"error: --output {tmp_path}: is a folder; name a file to write"
    ]


# Out of CI (marker slow). CI covers its core:
# predict: test_predict_matches_the_model and test_predict.py
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_predict_writes_one_column_per_task_in_the_labels_units(tmp_path, esol_subset):
    out = tmp_path / "run"
    trained = run_script(
        [SINGLE, esol_subset, "--label-column", "logSolubility", "--output-dir", out, *FAST_FLAGS]
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "predict.py"), str(out), "-"],
        input="CCO\nc1ccccc1\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "smiles,logSolubility" and len(lines) == 3
    assert all(
        -8 < float(line.split(",")[1]) < 3 for line in lines[1:]
    )  # log mol/L, not standardised units

    # an ensemble: a second seed's model, and the mean of the two
    other = tmp_path / "seed_2"
    assert (
        run_script(
            [
                SINGLE,
                esol_subset,
                "--label-column",
                "logSolubility",
                "--output-dir",
                other,
                "--seed",
                "2",
                *FAST_FLAGS,
            ]
        ).returncode
        == 0
    )
    single = [_predict([model, "-"], "CCO\nc1ccccc1\n") for model in (out, other)]
    both = _predict([out, other, "-"], "CCO\nc1ccccc1\n")
    assert single[0] != single[1]
    assert both == pytest.approx([(a + b) / 2 for a, b in zip(*single)], abs=2e-6)

    # models trained for other tasks do not average: one clear line
    (other / "task.json").write_text(
        (other / "task.json").read_text().replace("logSolubility", "solubility")
    )
    refused = run_script([SCRIPTS / "predict.py", out, other, esol_subset])
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert error_lines(refused.stderr) == [
        f"error: {other} predicts regression of ['solubility'], {out} regression "
        f"of ['logSolubility']: an ensemble needs the same tasks"
    ]


def _predict(arguments, stdin):
    """predict.py's predictions for SMILES given on stdin, one task."""
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "predict.py"), *map(str, arguments)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return [float(line.split(",")[1]) for line in result.stdout.splitlines()[1:]]


@pytest.mark.faults  # injected (a read error), as the rest of the fault suite
@pytest.mark.timeout(300)
def test_a_transient_read_error_on_a_snapshot_is_retried_by_the_restart(tmp_path, bbbp_subset):
    out, fired = tmp_path / "run", tmp_path / "fired"
    fired.mkdir()
    first = run_script([FAULT_TOLERANT, bbbp_subset, "--output-dir", out, *_flags(1)], nproc=2)
    assert first.returncode == 0, first.stderr[-2000:]
    inject = ROOT / "tests" / "integration" / "inject_faults.py"
    flags = ["--output-dir", out, "--resume", *_flags(2)]
    result = run_script(
        [inject, FAULT_TOLERANT, bbbp_subset, *flags],
        nproc=2,
        max_restarts=1,
        env={"FAULTS": "0:read:0:eio", "FAULT_DIR": str(fired)},
    )
    assert list(fired.iterdir()), "the read error never fired"
    assert any("cannot read now (OSError" in e for e in error_lines(result.stderr))
    assert result.returncode == 0, result.stderr[-3000:]  # the restart read it and went on
    assert json.loads((out / "metrics.json").read_text())["epochs_completed"] == 2


@pytest.mark.faults  # injected (a small disk), as the rest of the fault suite
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", [DDP, FAULT_TOLERANT], ids=["ddp", "fault_tolerant"])
def test_a_full_disk_ends_in_one_line_and_leaves_the_last_snapshot_whole(
    tmp_path, bbbp_subset, script
):
    out = tmp_path / "run"
    assert run_script([DDP, bbbp_subset, "--output-dir", out, *_flags(2)], nproc=2).returncode == 0
    before = _contents(out)
    small_disk = ROOT / "tests" / "integration" / "small_disk.py"
    snapshot = out / "checkpoints" / "last.pt"
    result = run_script(
        [small_disk, script, bbbp_subset, "--output-dir", out, "--resume", *_flags(3)],
        nproc=2,
        env={"FILE_SIZE_LIMIT": str(snapshot.stat().st_size // 2)},  # logs fit, a snapshot not
    )
    assert result.returncode != 0 and not our_traceback(result.stderr)
    errors = error_lines(result.stderr)
    if script == DDP:  # rank 0 says why; a peer may only see it go before torchrun stops it
        assert errors[0] == f"error: {snapshot}: File too large", result.stderr[-3000:]
        assert all("lost contact with another process" in e for e in errors[1:]), errors
    else:  # the fault-tolerant rung passes rank 0's failure to every rank
        assert errors == [f"error: rank 0 failed: {snapshot}: File too large"] * 2, errors
    after = _contents(out)
    results = [n for n in before if n.parts[0] != "logs" and not n.name.startswith((".", "events"))]
    assert {"checkpoints/last.pt", "metrics.json"} <= set(map(str, results))
    assert {n: after[n] for n in results} == {n: before[n] for n in results}  # untouched
    assert not list(out.rglob(".*.tmp"))
