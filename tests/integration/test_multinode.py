"""Two torchrun agents on 127.0.0.1 acting as two nodes (the SLURM recipes: test_slurm.py)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

from helpers import FAST_FLAGS, FAULT_TOLERANT, ROOT, free_port, with_flag
import pytest


@pytest.mark.timeout(300)
def test_two_nodes_train_together(tmp_path, bbbp_subset):
    out = tmp_path / "run"
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}",
                "--rdzv-id=partorch-test",
                str(FAULT_TOLERANT),
                str(bbbp_subset),
                "--output-dir",
                str(out),
                *FAST_FLAGS,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"},
        )
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=280) for agent in agents]
    for agent, (_, stderr) in zip(agents, outputs):
        assert agent.returncode == 0, stderr[-3000:]
    finals = [
        line
        for stdout, _ in outputs
        for line in stdout.splitlines()
        if line.startswith("Final test ROC AUC")
    ]
    assert len(finals) == 1
    logs = {p.name: p.read_text() for p in (out / "logs").iterdir()}
    assert sorted(logs) == ["rank0.log", "rank1.log", "rank2.log", "rank3.log"]
    for rank, name in enumerate(sorted(logs)):
        assert (
            f"rank {rank} of 4" in logs[name]
        )  # one job of four ranks, each logging to its own file
    assert json.loads((out / "metrics.json").read_text())["world_size"] == 4
    assert len(list(out.glob("events.out.tfevents.*"))) == 1  # one TensorBoard writer across nodes


@pytest.mark.faults  # injected (a worker killed), as the rest of the fault suite
@pytest.mark.timeout(400)
def test_a_worker_killed_on_one_node_restarts_the_job_on_both(tmp_path, bbbp_subset):
    """torchrun counts a restart only on the node whose worker died; the other node may restart its
    worker as a membership change. Both must still meet in the same attempt and resume alike."""
    out = tmp_path / "run"
    endpoint = f"127.0.0.1:{free_port()}"
    flags = with_flag(FAST_FLAGS, "--epochs", 6)
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}",
                "--rdzv-id=partorch-restart",
                "--max-restarts=3",
                str(FAULT_TOLERANT),
                str(bbbp_subset),
                "--output-dir",
                str(out),
                *flags,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"},
        )
        for _ in range(2)
    ]
    try:
        snapshot, deadline = out / "checkpoints" / "last.pt", time.time() + 200
        while not snapshot.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert snapshot.exists(), "no snapshot was written"
        workers = [
            subprocess.run(
                ["pgrep", "-P", str(agent.pid)], capture_output=True, text=True
            ).stdout.split()
            for agent in agents
        ]
        assert [len(w) for w in workers] == [1, 1]
        # The first node's worker is frozen (as if busy scoring dev) while the second node's dies
        # mid-epoch, so the first node's agent sees the other node rejoin and restarts its worker as
        # a membership change: a restart its TORCHELASTIC_RESTART_COUNT does not count.
        os.kill(int(workers[0][0]), signal.SIGSTOP)
        os.kill(int(workers[1][0]), signal.SIGKILL)
        time.sleep(5)
        os.kill(int(workers[0][0]), signal.SIGCONT)
        outputs = [agent.communicate(timeout=300) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
    for agent, (_, stderr) in zip(agents, outputs):
        assert agent.returncode == 0, stderr[-3000:]
    finals = [
        line
        for stdout, _ in outputs
        for line in stdout.splitlines()
        if line.startswith("Final test ROC AUC")
    ]
    assert len(finals) == 1
    logs = "".join(p.read_text() for p in (out / "logs").iterdir())
    resumed = re.findall(r"\[rank(\d)\] INFO resumed from the snapshot after epoch (\d+)", logs)
    assert (
        sorted(rank for rank, _ in resumed) == ["0", "1"]
        and len({epoch for _, epoch in resumed}) == 1
    ), resumed
    metrics = json.loads((out / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3, 4, 5, 6] and metrics[
        "world_size"
    ] == 2
