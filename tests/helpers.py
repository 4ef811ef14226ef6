"""What the tests share: paths, flags for quick runs, and running scripts for real."""

import importlib.util
import os
from pathlib import Path
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
BENCHMARKS = ROOT / "benchmarks"
FAULT_TOLERANT = SCRIPTS / "fault_tolerant_ddp.py"
DDP = SCRIPTS / "basic_neural_network_ddp.py"
PRETRAIN = SCRIPTS / "pretrain_ddp.py"
SINGLE = SCRIPTS / "basic_neural_network.py"
EXAMPLE = ROOT / "examples" / "fingerprint_mlp_ddp.py"
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"
# A small model and few epochs: the integration tests check plumbing, not accuracy.
FAST_FLAGS = [
    "--epochs",
    "2",
    "--embedding-dim",
    "16",
    "--d-model",
    "16",
    "--num-layers",
    "1",
    "--batch-size",
    "32",
    "--quiet",
]


def load_module(path):
    """A script (a rung, a benchmark) as a fresh module of its own, its main not run: each call
    gives a new one, so a test's monkeypatching of it reaches no other test."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parser_of(script):
    """A training script's own argparse parser (its build_parser)."""
    return load_module(script).build_parser()


def free_port():
    """A TCP port nobody listens on now, for a rendezvous of our own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_dataset(name):
    """A data set from the folder CI places beside the project; skips, saying why, without it."""
    path = SHARED_DATASETS / name
    if not path.exists():
        pytest.skip(
            f"needs {name} from the shared data folder beside the project ({path} is absent)"
        )
    return path


def with_flag(flags, name, value):
    """`flags` with `name` set to `value` (replaced if present)."""
    flags = list(flags)
    if name in flags:
        flags[flags.index(name) + 1] = str(value)
        return flags
    return flags + [name, str(value)]


def synthetic_molecules(n, seed=0):
    """SMILES-like strings whose label is whether they contain chlorine."""
    rng = np.random.default_rng(seed)
    pieces = ["C", "CC", "O", "N", "c1ccccc1", "C(=O)", "[C@@H]", "Br"]
    smiles, labels = [], []
    for i in range(n):
        body = "".join(rng.choice(pieces, size=rng.integers(2, 7)))
        label = i % 2
        smiles.append(body + "Cl" + "C" if label else body + "C")
        labels.append(label)
    return smiles, np.array(labels)


def run_command(command, timeout=240, env=None, cwd=ROOT):
    """Run a command for real, in a session of its own: on a timeout the
    whole tree (torchrun, its workers, a benchmark's jobs) goes, not only
    the first process, so no orphan keeps loading the machine for the tests
    after it."""
    with subprocess.Popen(
        [str(a) for a in command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_script(args, nproc=None, timeout=240, env=None, cwd=ROOT, max_restarts=0):
    """Run a script for real: under torchrun when nproc is given (which restarts
    the job up to `max_restarts` times)."""
    launcher = [sys.executable]
    if nproc:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        launcher += [f"--max-restarts={max_restarts}"]
    return run_command(
        launcher + list(args), timeout, {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, cwd
    )


def python_at_once(code, args, env, copies=3, timeout=120):
    """Start `copies` Python processes running `code` with `args` at once, as the ranks of a
    node start (env added to ours, the project importable); the stdout of each, once all have
    exited 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(copies)
    ]
    outputs = [p.communicate(timeout=timeout) for p in processes]
    assert all(p.returncode == 0 for p in processes), [err for _, err in outputs]
    return [out for out, _ in outputs]


def count_calls(monkeypatch, module, name):
    """Replace module.name by itself, counted: the list of each call's positional arguments."""
    calls, function = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def final_lines(stdout, metric="ROC AUC"):
    return [line for line in stdout.splitlines() if line.startswith(f"Final test {metric}: ")]


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def our_traceback(stderr):
    """Traceback frames from our code, with or without torchrun's `[rankN]:`
    prefix (torchrun's own failure report is allowed; the checkout's folder
    may itself be called partorch, and hold the virtual environment)."""
    ours = tuple(f'File "{ROOT / folder}/' for folder in ("partorch", "scripts", "examples"))
    return [line for line in stderr.splitlines() if any(frame in line for frame in ours)]


def chunk_report(items, *args):
    """What a chunked.in_chunks task saw: (its process, how many items, the extra arguments).
    Here, not in a test module: a spawned pool process imports it by name."""
    return [(os.getpid(), len(items), args)]
