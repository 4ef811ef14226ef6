"""The Slurm recipes in examples/slurm/, run without Slurm: fake `srun` and
`scontrol` first on PATH, the variables Slurm would set, one node (this
machine). The print-only mode is checked for both recipes; the CPU recipe
also trains for real through the fake srun, two workers on loopback."""

import json
import os
from pathlib import Path
import shlex
import signal
import subprocess
import sys
import time

from helpers import FAST_FLAGS, ROOT, final_lines, free_port, run_command, with_flag
import pytest

GPU_SBATCH = ROOT / "examples" / "slurm" / "train_ddp.sbatch"
CPU_SBATCH = ROOT / "examples" / "slurm" / "train_ddp_cpu.sbatch"
JOB_ID = 4242
DERIVED_PORT = 20000 + JOB_ID % 10000  # the recipes' rule

# Records its arguments (one a line), skips its own options and runs the
# command after them once: the fake allocation has one node. The recipes
# write srun options as --name=value; a few value-taking options are also
# understood in the "--name value" / "-N 2" form, so a recipe that switches
# to it does not send an option value here as the command.
FAKE_SRUN = r"""#!/bin/bash
printf '%s\n' "$@" > "$FAKE_SRUN_RECORD"
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --*=*) shift ;;
    -N|-n|-c|-p|-A|-t|-J|-o|-e|--nodes|--ntasks|--ntasks-per-node|--cpus-per-task|--partition|--account|\
--time|--job-name|--output|--error|--gpus|--gpus-per-node|--gres|--mem|--export|--cpu-bind|--distribution)
      shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "fake srun: no command" >&2; exit 2; }
exec "$@"
"""
FAKE_SCONTROL = r"""#!/bin/sh
if [ "$1" = requeue ]; then echo "$2" >> "$FAKE_REQUEUE_RECORD"; exit 0; fi
[ "$1 $2" = "show hostnames" ] || { echo "fake scontrol: only 'show hostnames'" >&2; exit 2; }
echo 127.0.0.1
"""


@pytest.fixture
def fake_slurm(tmp_path):
    """The environment of a one-node allocation with fake srun and scontrol."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SRUN_", "PARTORCH_", "RDZV_"))
    }
    env.pop("OMP_NUM_THREADS", None)
    env.pop("NPROC", None)
    env.pop("OUTPUT_DIR", None)
    # torchrun from this interpreter's environment, even if it was not activated
    env["PATH"] = os.pathsep.join(
        [str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    env.update(
        SLURM_JOB_ID=str(JOB_ID),
        SLURM_JOB_NODELIST="127.0.0.1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_NNODES="1",
        SLURM_NTASKS="1",
        SLURM_CPUS_PER_TASK="2",
        FAKE_SRUN_RECORD=str(tmp_path / "srun_args.txt"),
        FAKE_REQUEUE_RECORD=str(tmp_path / "requeued.txt"),
    )
    return env


def _run(sbatch, args, env, timeout):
    return run_command(["bash", sbatch, *args], timeout, env)


def _printed(sbatch, env, args=("data/HIV.csv", "--label-column", "HIV_active")):
    result = _run(sbatch, args, {**env, "PARTORCH_PRINT_COMMAND": "1"}, timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return lines[0]


def _split(line):
    """srun's options and the torchrun command after them."""
    words = shlex.split(line)
    assert words[0] == "srun"
    start = words.index("torchrun")
    return words[1:start], words[start:]


def _value(words, flag):
    return words[words.index(flag) + 1]


@pytest.mark.parametrize("sbatch", [GPU_SBATCH, CPU_SBATCH], ids=["gpu", "cpu"])
def test_recipes_are_valid_bash(sbatch):
    assert subprocess.run(["bash", "-n", str(sbatch)]).returncode == 0


@pytest.mark.parametrize(
    "sbatch, gpus, cpus, nproc_env, nproc",
    [
        (GPU_SBATCH, "4", "16", None, "4"),  # one worker per GPU
        (CPU_SBATCH, None, "2", None, "2"),  # 4 workers, but never more than the cores
        (CPU_SBATCH, None, "32", None, "4"),  # 4 workers x 8 threads
        (CPU_SBATCH, None, "32", "8", "8"),  # NPROC chooses
    ],
    ids=["gpu", "cpu-2-cores", "cpu-32-cores", "cpu-NPROC"],
)
def test_print_only(fake_slurm, sbatch, gpus, cpus, nproc_env, nproc):
    env = {**fake_slurm, "SLURM_CPUS_PER_TASK": cpus}
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = gpus
    if nproc_env:
        env["NPROC"] = nproc_env
    line = _printed(sbatch, env)
    assert not Path(fake_slurm["FAKE_SRUN_RECORD"]).exists()  # printed, not run
    srun_options, command = _split(line)
    assert f"--cpus-per-task={cpus}" in srun_options
    assert "--kill-on-bad-exit=1" in srun_options
    assert "--ntasks-per-node=1" in srun_options
    assert f"--rdzv-endpoint 127.0.0.1:{DERIVED_PORT}" in line
    assert f"--rdzv-id {JOB_ID}" in line
    for flag, value in [
        ("--nnodes", "1"),
        ("--nproc-per-node", nproc),
        ("--rdzv-backend", "c10d"),
        ("--max-restarts", "3"),
        ("--output-dir", f"runs/slurm-{JOB_ID}"),
    ]:
        assert _value(command, flag) == value, flag
    assert "--quiet" not in command  # the per-epoch lines belong in the .out file
    # the command parses with torchrun's own parser, and the rest with our script's
    from torch.distributed.run import get_args_parser

    torchrun_args = get_args_parser().parse_args(command[1:])
    assert Path(torchrun_args.training_script).name == "fault_tolerant_ddp.py"
    sys.path.insert(0, str(ROOT / "scripts"))
    from fault_tolerant_ddp import build_parser

    script_args = build_parser().parse_args(torchrun_args.training_script_args)
    assert script_args.dataset == "data/HIV.csv" and script_args.label_column == ["HIV_active"]
    assert script_args.resume == "auto"  # a requeued job continues its snapshot


@pytest.mark.parametrize("sbatch", [GPU_SBATCH, CPU_SBATCH], ids=["gpu", "cpu"])
def test_rdzv_port_and_output_dir_overrides(fake_slurm, sbatch):
    env = {
        **fake_slurm,
        "SLURM_GPUS_ON_NODE": "2",
        "RDZV_PORT": "23456",
        "OUTPUT_DIR": "/shared/runs/x",
    }
    _, command = _split(_printed(sbatch, env, args=()))
    assert _value(command, "--rdzv-endpoint") == "127.0.0.1:23456"
    assert _value(command, "--output-dir") == "/shared/runs/x"
    assert (
        command[command.index("scripts/fault_tolerant_ddp.py") + 1] == "dataset/BBBP.csv"
    )  # the default


def test_gpu_recipe_refuses_an_allocation_without_gpus(fake_slurm):
    result = _run(GPU_SBATCH, [], {**fake_slurm, "PARTORCH_PRINT_COMMAND": "1"}, timeout=30)
    assert result.returncode != 0
    assert "train_ddp_cpu.sbatch" in result.stderr


@pytest.mark.timeout(400)
def test_cpu_recipe_trains_through_srun(fake_slurm, tmp_path, bbbp_subset):
    out = tmp_path / "run"
    env = {
        **fake_slurm,
        "SLURM_JOB_ID": "4243",
        "RDZV_PORT": str(free_port()),
        "OUTPUT_DIR": str(out),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    result = _run(CPU_SBATCH, [bbbp_subset, *FAST_FLAGS], env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(final_lines(result.stdout)) == 1, result.stdout
    assert json.loads((out / "metrics.json").read_text())["world_size"] == 2
    srun_args = Path(fake_slurm["FAKE_SRUN_RECORD"]).read_text().splitlines()
    assert "--cpus-per-task=2" in srun_args and "--kill-on-bad-exit=1" in srun_args


# Out of CI (marker slow). CI covers its core:
# SIGTERM snapshots: test_run_config's SIGTERM test
@pytest.mark.slow
def test_near_its_time_limit_the_job_snapshots_and_requeues_itself(
    fake_slurm, tmp_path, bbbp_subset
):
    """USR1 (what `#SBATCH --signal=B:USR1@180` sends the batch script) reaches the workers as
    SIGTERM; they snapshot and exit, the job asks `scontrol requeue`, and the requeued job
    (same id, same folder, same command) continues from the snapshot to the end."""
    out = tmp_path / "run"
    env = {
        **fake_slurm,
        "SLURM_JOB_ID": "4244",
        "OUTPUT_DIR": str(out),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    flags = [*with_flag(FAST_FLAGS, "--epochs", 6), "--batch-size", "8"]
    command = ["bash", CPU_SBATCH, bbbp_subset, *flags]
    with subprocess.Popen(
        [str(a) for a in command],
        env={**env, "RDZV_PORT": str(free_port())},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as job:
        log = out / "logs" / "rank0.log"
        deadline = time.monotonic() + 200
        while not (log.exists() and "epoch 1/6" in log.read_text()):
            assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()
            time.sleep(0.2)
        os.kill(job.pid, signal.SIGUSR1)
        _, stderr = job.communicate(timeout=120)
    assert job.returncode == 0, stderr[-3000:]
    assert "stopped on SIGTERM" in stderr and "requeue job 4244" in stderr
    assert Path(fake_slurm["FAKE_REQUEUE_RECORD"]).read_text().split() == ["4244"]
    assert not (out / "metrics.json").exists()
    requeued = _run(CPU_SBATCH, [bbbp_subset, *flags], {**env, "RDZV_PORT": str(free_port())}, 300)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert "resumed from the snapshot after" in log.read_text()
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert [row["epoch"] for row in history] == [1, 2, 3, 4, 5, 6]
