"""Two torchrun agents on 127.0.0.1 acting as two nodes, and the SLURM recipe."""
import json
import os
from pathlib import Path
import socket
import subprocess
import sys

import pytest

from helpers import DDP, FAST_FLAGS, ROOT

SBATCH = ROOT / "examples" / "slurm" / "train_ddp.sbatch"


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


def test_sbatch_recipe_parses_and_builds_a_torchrun_command(tmp_path):
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "scontrol").write_text("#!/bin/sh\nprintf 'node-a\\nnode-b\\n'\n")
    (fake_bin / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "PARTORCH_PRINT_COMMAND": "1",
           "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "42",
           "SLURM_GPUS_ON_NODE": "4"}
    result = subprocess.run(["bash", str(SBATCH), "data/HIV.csv", "--label-column", "HIV_active"], cwd=ROOT,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    assert words[0] == "torchrun"
    for flag, value in [("--nnodes", "2"), ("--nproc-per-node", "4"), ("--rdzv-endpoint", "node-a:29500"),
                        ("--rdzv-id", "42"), ("--output-dir", "runs/slurm-42")]:
        assert words[words.index(flag) + 1] == value
    # the command parses with torchrun's own parser and our script's
    from torch.distributed.run import get_args_parser
    torchrun_args = get_args_parser().parse_args(words[1:])
    assert Path(torchrun_args.training_script).name == "basic_neural_network_ddp.py"
    from partorch.flags import build_parser
    script_args = build_parser("", "x").parse_args(torchrun_args.training_script_args)
    assert script_args.dataset == "data/HIV.csv" and script_args.label_column == ["HIV_active"]
