import os
from pathlib import Path
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_BBBP = ROOT.parent / "shared" / "datasets" / "BBBP.csv"
SCRIPTS = ROOT / "scripts"
# A small model and few epochs: the integration tests check plumbing, not accuracy.
FAST_FLAGS = ["--epochs", "2", "--embedding-dim", "16", "--d-model", "16", "--num-layers", "1",
              "--batch-size", "32", "--quiet"]


@pytest.fixture(scope="session")
def bbbp_path():
    assert SHARED_BBBP.exists(), f"tests need {SHARED_BBBP}"
    return SHARED_BBBP


@pytest.fixture(scope="session")
def bbbp_subset(tmp_path_factory, bbbp_path):
    """The first 300 BBBP molecules: enough for a stratified split."""
    path = tmp_path_factory.mktemp("data") / "bbbp300.csv"
    pd.read_csv(bbbp_path).head(300).to_csv(path, index=False)
    return path


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


@pytest.fixture
def write_csv(tmp_path):
    def write(text, name="data.csv"):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


def run_script(args, nproc=None, timeout=240, env=None):
    """Run a training script for real: under torchrun when nproc is given."""
    launcher = [sys.executable]
    if nproc:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    # A session of its own: on a timeout the whole tree (torchrun, its
    # workers, a benchmark's jobs) goes, not only the first process, so no
    # orphan keeps loading the machine for the tests after it.
    with subprocess.Popen(launcher + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=ROOT, env=full_env, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
