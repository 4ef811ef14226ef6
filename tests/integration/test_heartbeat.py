"""Rank 0 scoring alone for longer than --dist-timeout: the others wait for
it while it lives, and give up at --eval-timeout on one alive but stuck (a
frozen one, silent to its peers: tests/integration/test_faults.py)."""

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
