"""Rank 0 scoring alone for longer than --dist-timeout: the others wait for
it while it lives, and give up within the timeout once it stops answering."""

import contextlib
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
    run_script,
    with_flag,
)
import pytest

SLOW = ROOT / "tests" / "integration" / "slow_evaluation.py"


@pytest.mark.timeout(200)
def test_a_slow_evaluation_on_rank0_does_not_time_out_the_waiting_ranks(tmp_path, bbbp_subset):
    flags = [*with_flag(FAST_FLAGS, "--epochs", 1), "--dist-timeout", "5"]
    result = run_script(
        [SLOW, FAULT_TOLERANT, bbbp_subset, "--output-dir", tmp_path / "run", *flags],
        nproc=2,
        env={"SLOW_EVALUATION_SECONDS": "12"},
        timeout=150,
    )  # dev scoring: 12 s, the timeout 5 s
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(final_lines(result.stdout)) == 1


@pytest.mark.timeout(200)
def test_a_frozen_rank0_is_still_noticed_within_the_timeout(tmp_path, bbbp_subset):
    marker = tmp_path / "evaluating"
    flags = [*with_flag(FAST_FLAGS, "--epochs", 1), "--dist-timeout", "5"]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "SLOW_EVALUATION_SECONDS": "30",
        "SLOW_EVALUATION_MARKER": str(marker),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        SLOW,
        FAULT_TOLERANT,
        bbbp_subset,
        "--output-dir",
        tmp_path / "run",
        *flags,
    ]
    job = subprocess.Popen(
        [str(c) for c in command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "rank 0 never started scoring"
        rank0 = int(marker.read_text())
        os.kill(rank0, signal.SIGSTOP)  # alive to the kernel, silent to its peers
        # After the 5 s timeout (and a margin) it may go on: had rank 1 kept waiting, the job would
        # now finish and pass; a job that noticed has already stopped it (and torchrun need not wait
        # 30 s to kill a frozen process).
        time.sleep(5 + 6)
        os.kill(rank0, signal.SIGCONT)
        _, stderr = job.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing left of the job, as it should be
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert job.returncode != 0
    assert any("lost contact with another process" in line for line in error_lines(stderr)), stderr[
        -3000:
    ]


@pytest.mark.timeout(200)
def test_a_rank0_alive_but_stuck_is_given_up_after_the_eval_timeout(tmp_path, bbbp_subset):
    flags = [*with_flag(FAST_FLAGS, "--epochs", 1), "--dist-timeout", "5", "--eval-timeout", "10"]
    started = time.time()
    result = run_script(
        [SLOW, FAULT_TOLERANT, bbbp_subset, "--output-dir", tmp_path / "run", *flags],
        nproc=2,
        env={"SLOW_EVALUATION_SECONDS": "90"},  # beats all along: only the ceiling ends it
        timeout=150,
    )
    assert result.returncode != 0 and time.time() - started < 80, result.stderr[-3000:]
    assert any(
        "rank 0 has been scoring for over 10 s (--eval-timeout)" in line
        for line in error_lines(result.stderr)
    ), result.stderr[-3000:]
    assert not final_lines(result.stdout)
