"""Fixtures and markers. Tests under tests/unit are marked `unit` (in-process,
seconds), under tests/integration `integration` (real torchrun, processes and
files). CI leaves out `slow` (a variant whose core another test runs, and the
benchmark), `faults` and `benchmark`. `python -m pytest -q tests` runs them all;
`-m unit` only the fast ones. The markers are declared in pyproject.toml."""

import os
from pathlib import Path

from helpers import ROOT, shared_dataset
import pandas as pd
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        layer = Path(item.fspath).parent.name
        if layer in ("unit", "integration"):
            item.add_marker(layer)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Runs keep what they compute once (prepared corpora, descriptors) in a cache that later
    runs read: the suite, its torchrun children included, keeps its own, so that it neither
    reads a user's nor leaves files in it. A test that needs a cache of its own sets one."""
    before = os.environ.get("PARTORCH_CACHE")
    os.environ["PARTORCH_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("PARTORCH_CACHE")
    else:
        os.environ["PARTORCH_CACHE"] = before


@pytest.fixture(scope="session")
def bbbp_path():
    return ROOT / "dataset" / "BBBP.csv"  # ships with the project


@pytest.fixture(scope="session")
def esol_path():
    return shared_dataset("ESOL.csv")


@pytest.fixture(scope="session")
def sider_path():
    return shared_dataset("SIDER.csv")


@pytest.fixture(scope="session")
def bbbp_subset(tmp_path_factory, bbbp_path):
    """The first 300 BBBP molecules: enough for a stratified split."""
    path = tmp_path_factory.mktemp("data") / "bbbp300.csv"
    pd.read_csv(bbbp_path).head(300).to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def sider_subset(tmp_path_factory, sider_path):
    """400 SIDER molecules, 27 tasks, with gaps cut into four columns (missing labels)."""
    frame = pd.read_csv(sider_path).head(400)
    for j, column in enumerate(frame.columns[1:5]):
        frame.loc[frame.index % (3 + j) == 0, column] = None
    path = tmp_path_factory.mktemp("data") / "sider400_gaps.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def esol_subset(tmp_path_factory, esol_path):
    path = tmp_path_factory.mktemp("data") / "esol400.csv"
    pd.read_csv(esol_path).head(400).to_csv(path, index=False)
    return path


@pytest.fixture
def write_csv(tmp_path):
    def write(text, name="data.csv"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
