"""Two torchrun agents on 127.0.0.1 acting as two nodes (the SLURM recipes: test_slurm.py)."""
import json
import os
import socket
import subprocess
import sys

import pytest

from helpers import DDP, FAST_FLAGS, ROOT

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(300)
def test_two_nodes_train_together(tmp_path, bbbp_subset):
    out = tmp_path / "run"
    endpoint = f"127.0.0.1:{_free_port()}"
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
         f"--rdzv-endpoint={endpoint}", "--rdzv-id=partorch-test", str(DDP),
         str(bbbp_subset), "--output-dir", str(out), *FAST_FLAGS],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}) for _ in range(2)]
    outputs = [agent.communicate(timeout=280) for agent in agents]
    for agent, (_, stderr) in zip(agents, outputs):
        assert agent.returncode == 0, stderr[-3000:]
    finals = [line for stdout, _ in outputs for line in stdout.splitlines() if line.startswith("Final test ROC AUC")]
    assert len(finals) == 1
    logs = {p.name: p.read_text() for p in (out / "logs").iterdir()}
    assert sorted(logs) == ["rank0.log", "rank1.log", "rank2.log", "rank3.log"]
    for rank, name in enumerate(sorted(logs)):
        assert f"rank {rank} of 4" in logs[name]  # one job of four ranks, each logging to its own file
    assert json.loads((out / "metrics.json").read_text())["world_size"] == 4
    assert len(list(out.glob("events.out.tfevents.*"))) == 1  # one TensorBoard writer across nodes
