"""The attempt number every rank of a torchrun job agrees on, whatever a dead
attempt left in the store, and the job name its restarts share; a worker's
exit without teardown."""

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
import os
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

from partorch.ddp.distributed import _agree_on_attempt

TIMEOUT = timedelta(seconds=20)


def _server():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT, wait_for_workers=False)


def _client(server):
    return dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=TIMEOUT)


def _attempt(server, world_size, delays):
    """Every rank's number, each rank starting after its delay (seconds)."""

    def rank(r):
        time.sleep(delays[r])
        return _agree_on_attempt(_client(server), r, world_size, TIMEOUT)

    with ThreadPoolExecutor(world_size) as pool:
        return list(pool.map(rank, range(world_size)))


def test_every_rank_agrees_and_each_attempt_gets_a_new_number():
    server = _server()
    assert _attempt(server, 3, [0, 0, 0]) == [1, 1, 1]
    assert _attempt(server, 3, [0.3, 0, 0.1]) == [
        2,
        2,
        2,
    ]  # rank 1 reads the dead attempt's number first


def test_keys_a_dead_attempt_left_behind_cannot_fool_a_rank():
    server = _server()
    assert _attempt(server, 2, [0, 0]) == [1, 1]
    # an attempt whose rank 0 drew a number and died before anyone answered: a stale 'current', no
    # 'go'
    stale = _client(server)
    stale.add("partorch/attempts", 1)
    stale.set("partorch/current", "2")
    # the next attempt: rank 1 starts first and sees number 2, then attempt 1's finished handshake
    assert _attempt(server, 2, [0.5, 0]) == [3, 3]
    # the number of a different world size (a node gone) is agreed as well
    assert _attempt(server, 1, [0]) == [4]


def test_a_restart_keeps_the_jobs_name_and_gets_a_new_attempt(monkeypatch):
    from partorch.ddp import distributed

    monkeypatch.setattr(distributed, "_job", None)  # restored after the test
    server = _server()
    for name, value in dict(
        WORLD_SIZE="1",
        RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(server.port),
        TORCHELASTIC_USE_AGENT_STORE="True",
        TORCHELASTIC_RUN_ID="none",
    ).items():
        monkeypatch.setenv(name, value)
    first = distributed.rendezvous(TIMEOUT)
    job = distributed.torchrun_job_key()
    second = distributed.rendezvous(
        TIMEOUT
    )  # torchrun restarted the worker: same store, new process
    assert job.startswith("store:") and distributed.torchrun_job_key() == job
    first["store"].set("k", "1")
    assert not second["store"].check(["k"])  # each attempt its own keys
    # --rdzv-id names a job to torchrun, but a new job may reuse it: the store's name wins
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    distributed.rendezvous(TIMEOUT)
    assert distributed.torchrun_job_key() == job
    # a launcher without torchrun's agent store: the --rdzv-id is all there is
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    distributed.rendezvous(TIMEOUT)
    assert distributed.torchrun_job_key() == "rdzv:job-7"


def test_without_a_name_for_the_job_a_restart_is_told_by_this_nodes_count(monkeypatch):
    from partorch.ddp import distributed

    monkeypatch.setattr(
        distributed, "_job", None
    )  # e.g. TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, no --rdzv-id
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert not distributed.is_restart_of(None)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert distributed.is_restart_of(None)
    monkeypatch.setattr(distributed, "_job", "rdzv:a")  # a named job: only its own snapshot
    assert distributed.is_restart_of("rdzv:a") and not distributed.is_restart_of("rdzv:b")


def test_only_errors_a_retry_would_meet_again_stop_torchrun_s_restarts(monkeypatch):
    import partorch.ddp.distributed as distributed
    from partorch.ddp.errors import (
        PartorchError,
        UnexpectedError,
        UnexpectedFailure,
        raise_if_failed,
        run_or_report,
    )

    store = dist.HashStore()
    monkeypatch.setattr(distributed, "_store", store)

    def fails(exc):
        def work():
            raise exc

        return work

    disk_full = run_or_report(fails(OSError(28, "No space left on device (connection timed out)")))
    assert isinstance(disk_full, UnexpectedFailure)  # rank 0's own trouble, passed on as one line
    with pytest.raises(UnexpectedError) as raised:
        raise_if_failed(disk_full)
    distributed.remember_failure(raised.value)
    assert not store.check([distributed.FAILED_KEY])  # a restart may get past it: not noted
    distributed.remember_failure(PartorchError("data.csv: no column 'p_np'"))
    assert store.get(distributed.FAILED_KEY) == b"data.csv: no column 'p_np'"


def test_exit_without_teardown_flushes_output_and_skips_the_interpreters_teardown():
    code = (
        "import atexit, sys\n"
        "from partorch.ddp.errors import exit_without_teardown\n"
        "atexit.register(print, 'teardown ran')\n"
        "print('result', end='')\n"
        "sys.stderr.write('note')\n"
        "exit_without_teardown()\n"
        "print('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "result" and done.stderr == "note"


@pytest.mark.parametrize("worker", [True, False])
def test_run_main_skips_the_teardown_of_a_torchrun_worker_only(worker):
    code = (
        "import argparse, atexit\n"
        "from partorch import run_main\n"
        "atexit.register(print, 'teardown ran')\n"
        "run_main(lambda args: print('trained'), argparse.ArgumentParser())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    env.update({"LOCAL_RANK": "1"} if worker else {})
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("trained\n" if worker else "trained\nteardown ran\n")
