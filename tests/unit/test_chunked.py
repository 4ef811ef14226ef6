"""chunked.in_chunks: RDKit's per-molecule work, in this process or over a pool."""

import os

from helpers import chunk_report
import pytest

from partorch.ddp import distributed
from partorch.molecules import chunked
from partorch.molecules.chem import canonical_smiles


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(chunked, "pool_cores", lambda: 2)


def test_small_inputs_stay_in_this_process_chunk_by_chunk(two_cores):
    reports = chunked.joined(chunk_report, list(range(12)), "x", description="d", chunk=5)
    assert reports == [(os.getpid(), 5, ("x",)), (os.getpid(), 5, ("x",)), (os.getpid(), 2, ("x",))]


def test_large_inputs_go_to_a_pool_in_order(two_cores):
    reports = chunked.joined(chunk_report, list(range(12)), 7, description="d", chunk=5, least=10)
    assert [(count, args) for _, count, args in reports] == [(5, (7,)), (5, (7,)), (2, (7,))]
    assert os.getpid() not in {pid for pid, _, _ in reports}
    smiles = ["OCC", "c1ccccc1O", "not a molecule", "C(C)O"] * 3
    pooled = chunked.joined(canonical_smiles, smiles, description="d", chunk=5, least=0)
    assert pooled == canonical_smiles(smiles) and pooled[:4] == ["CCO", "Oc1ccccc1", None, "CCO"]


def test_pool_size_follows_the_molecules_the_cores_and_the_cap(monkeypatch, two_cores):
    assert chunked.pool_workers(19_999) == 1  # below POOL_MIN_MOLECULES
    assert chunked.pool_workers(20_000) == 2
    assert chunked.pool_workers(50, chunk=50, least=0) == 1  # one chunk: one process
    monkeypatch.setattr(chunked, "pool_cores", lambda: 64)
    assert chunked.pool_workers(10**6) == chunked.MAX_WORKERS
    assert chunked.pool_workers(10**6, most=40) == 40  # prepare_data.py --workers 40


def test_no_items_give_the_function_s_own_empty_result():
    assert chunked.in_chunks(chunk_report, [], description="d") == [[(os.getpid(), 0, ())]]
    assert chunked.joined(canonical_smiles, [], description="d") == []


def test_a_pool_takes_this_process_s_share_of_the_cores_when_every_process_computes(
    monkeypatch,
):
    monkeypatch.setattr(distributed, "available_cores", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert chunked.pool_workers(10**6) == 8  # the one process the cache's lock lets compute
    with distributed.every_local_process_computes():
        assert chunked.pool_workers(10**6) == 2  # 8 cores, 3 processes computing at once
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
        assert chunked.pool_workers(10**6) == 1
    assert chunked.pool_workers(10**6) == 8
