"""The fault-injection suite: `python -m pytest -m faults tests` alone (14 cases, about 5
minutes on 2 cores); the full run includes it, CI leaves it out (see the README).

Each case kills (SIGKILL) or freezes (SIGSTOP) a worker at one point of a
real torchrun job (tests/integration/inject_faults.py fires the fault from
inside the worker, so it lands exactly there) and checks how the job ends:
with restarts allowed, like an uninterrupted run to the last digit; without,
with a non-zero exit in bounded time and the last complete snapshot intact.
Never a half-written or mixed snapshot, never a hang."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

from helpers import (
    FAST_FLAGS,
    FAULT_TOLERANT,
    ROOT,
    error_lines,
    final_lines,
    free_port,
    our_traceback,
    run_command,
    with_flag,
)
import pytest

from partorch.ddp.checkpoint import load_state

pytestmark = pytest.mark.faults
INJECT = ROOT / "tests" / "integration" / "inject_faults.py"
FLAGS = [*with_flag(FAST_FLAGS, "--epochs", 3), "--dist-timeout", "5"]
BOUND_SECONDS = 150  # a job with faults ends within this, however it ends


def _job(tmp_path, data, faults, max_restarts, nodes=1):
    """Run the fault-tolerant script under torchrun with `faults`: (agents' results, seconds)."""
    out, fired = tmp_path / "run", tmp_path / "fired"
    fired.mkdir()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "FAULTS": faults,
        "FAULT_DIR": str(fired),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    if nodes == 1:
        launch = ["--standalone", "--nproc-per-node=2"]
    else:
        launch = [
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            "--rdzv-id=faults",
        ]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launch,
        f"--max-restarts={max_restarts}",
        INJECT,
        FAULT_TOLERANT,
        data,
        "--output-dir",
        out,
        *FLAGS,
    ]
    started = time.time()
    if nodes == 1:
        results = [run_command(command, timeout=BOUND_SECONDS, env=env)]
    else:
        agents = [
            subprocess.Popen(
                [str(c) for c in command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )
            for _ in range(nodes)
        ]
        try:
            outputs = [
                agent.communicate(timeout=max(1, BOUND_SECONDS - (time.time() - started)))
                for agent in agents
            ]
            results = [
                subprocess.CompletedProcess(a.args, a.returncode, *out)
                for a, out in zip(agents, outputs)
            ]
        finally:
            for agent in agents:  # a job that outlived the bound leaves no torchrun tree behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.pid, signal.SIGKILL)
    return results, time.time() - started, out, sorted(p.name for p in fired.iterdir())


def _outcome(out):
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "test_roc_auc": metrics["test_roc_auc"],
        "history": [(h["epoch"], h["train_loss"], h["dev_roc_auc"]) for h in metrics["history"]],
    }


def _snapshot_is_whole_and_ours(out, epochs, reference):
    snapshot = load_state(out / "checkpoints" / "last.pt")  # a half-written file would raise here
    assert snapshot["state"]["epoch"] == epochs
    assert [
        (h["epoch"], h["train_loss"], h["dev_roc_auc"]) for h in snapshot["state"]["history"]
    ] == reference["history"][:epochs]  # not mixed with another attempt's epochs
    assert snapshot["identity"] == reference["identity"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, bbbp_subset):
    out = tmp_path_factory.mktemp("reference") / "run"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        FAULT_TOLERANT,
        bbbp_subset,
        "--output-dir",
        out,
        *FLAGS,
    ]
    result = run_command(
        command, timeout=BOUND_SECONDS, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {**_outcome(out), "identity": load_state(out / "checkpoints" / "last.pt")["identity"]}


# (faults, nodes): each ends like the uninterrupted run, torchrun restarting the job
RECOVERED = {
    "kill rank 1 mid-epoch": ("1:epoch:2:kill", 1),
    "kill rank 0 mid-epoch": ("0:epoch:2:kill", 1),
    "freeze rank 1 mid-epoch": ("1:epoch:2:stop", 1),
    "kill rank 0 while it scores dev": ("0:evaluation:2:kill", 1),
    "freeze rank 0 while it scores dev": ("0:evaluation:2:stop", 1),
    "kill rank 0 halfway through writing a snapshot": ("0:snapshot:2:kill", 1),
    "freeze rank 0 halfway through writing a snapshot": ("0:snapshot:2:stop", 1),
    "kill rank 1 mid-epoch, then again as the job restarts": ("1:epoch:2:kill;1:restart:0:kill", 1),
    "two nodes: kill one node's worker mid-epoch, then again as it rejoins": (
        "1:epoch:2:kill;1:restart:0:kill",
        2,
    ),
    "two nodes: freeze rank 0's node while it scores dev": ("0:evaluation:1:stop", 2),
}


@pytest.mark.timeout(BOUND_SECONDS + 60)
@pytest.mark.parametrize("name", RECOVERED)
def test_a_fault_with_restarts_ends_like_an_uninterrupted_run(
    tmp_path, bbbp_subset, reference, name
):
    faults, nodes = RECOVERED[name]
    results, seconds, out, fired = _job(tmp_path, bbbp_subset, faults, max_restarts=3, nodes=nodes)
    assert fired == [str(i) for i in range(len(faults.split(";")))], "a fault never fired"
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
        assert not our_traceback(result.stderr)
    assert sum(len(final_lines(r.stdout)) for r in results) == 1
    assert _outcome(out) == {k: reference[k] for k in ("test_roc_auc", "history")}
    _snapshot_is_whole_and_ours(out, 3, reference)
    assert not list((out / "checkpoints").glob(".*.tmp"))  # a killed writer's half file was cleared
    print(f"\n{name}: recovered in {seconds:.0f} s")


# (faults, the last complete epoch): without restarts the job stops; what it wrote stays whole
STOPPED = {
    "kill rank 1 mid-epoch": ("1:epoch:2:kill", 1),
    "freeze rank 1 mid-epoch": ("1:epoch:2:stop", 1),
    "freeze rank 0 while it scores dev": ("0:evaluation:2:stop", 1),
    "kill rank 0 halfway through writing a snapshot": ("0:snapshot:2:kill", 1),
}


@pytest.mark.timeout(BOUND_SECONDS + 60)
@pytest.mark.parametrize("name", STOPPED)
def test_a_fault_without_restarts_stops_the_job_cleanly(tmp_path, bbbp_subset, reference, name):
    faults, complete = STOPPED[name]
    (result,), seconds, out, fired = _job(tmp_path, bbbp_subset, faults, max_restarts=0)
    assert fired == ["0"]
    assert result.returncode != 0 and seconds < BOUND_SECONDS
    assert not our_traceback(result.stderr) and not final_lines(result.stdout)
    if faults.endswith("stop"):  # the frozen rank's peer says what happened, in one line
        assert any("lost contact with another process" in e for e in error_lines(result.stderr)), (
            result.stderr
        )
    _snapshot_is_whole_and_ours(out, complete, reference)
    assert not (out / "metrics.json").exists()
    print(f"\n{name}: stopped in {seconds:.0f} s")
