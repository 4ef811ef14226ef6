"""Start-up progress (issue 39, item 6): a timed log line per phase before the first epoch,
and a bar over canonicalisation on rank 0's terminal for big inputs only."""

import io
import logging
import re
import sys

import pandas as pd
import pytest

from partorch.ddp.logs import add_log_file, log, setup_logging
from partorch.molecules import chunked, molecule_data
from partorch.molecules.chem import canonical_smiles


class Terminal(io.StringIO):
    def isatty(self):  # what tqdm's disable=None asks before drawing
        return True


@pytest.fixture
def small_csv(tmp_path, bbbp_path):
    path = tmp_path / "bbbp200.csv"
    pd.read_csv(bbbp_path).head(200).to_csv(path, index=False)
    return path


@pytest.fixture
def startup_log(caplog, monkeypatch):
    # an earlier test's setup_logging may have left its console handler and propagate=False
    monkeypatch.setattr(log, "handlers", [caplog.handler])
    monkeypatch.setattr(log, "propagate", False)  # caplog's handler sits on the root logger too
    with caplog.at_level(logging.INFO, logger="partorch"):
        yield caplog


def on_terminal(monkeypatch):
    """Rank 0 of a run on a terminal. Called in the test itself: pytest's capture swaps
    sys.stderr back between a fixture's setup and the test."""
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.delenv("RANK", raising=False)
    return screen


SECONDS = r" in \d+\.\d\d s$"


@pytest.mark.parametrize(
    "split, form, parsing",
    [("stratified", "canonical", "canonical SMILES"), ("scaffold", "raw", "parsed SMILES")],
)
def test_each_startup_phase_logs_its_time(small_csv, startup_log, split, form, parsing):
    molecule_data(small_csv, split=split, smiles_form=form)
    lines = [r.getMessage() for r in startup_log.records if r.getMessage().startswith("start-up")]
    expected = [
        rf"start-up: read {re.escape(str(small_csv))} \(200 rows\)",
        rf"start-up: {parsing} for 200 molecules",
        rf"start-up: {split} split",
        r"start-up: smiles vocabulary",
        r"start-up: tokenized 19\d molecules",  # a few BBBP rows are dropped as unparsable
    ]
    assert len(lines) == len(expected), lines
    for pattern, line in zip(expected, lines):
        assert re.fullmatch(pattern + SECONDS, line), line
    assert any("train" in r.getMessage() for r in startup_log.records)  # the old line stays


def test_bar_is_drawn_on_rank_0_terminal_for_big_inputs_with_unchanged_results(
    monkeypatch, bbbp_path
):
    terminal = on_terminal(monkeypatch)
    smiles = pd.read_csv(bbbp_path)["smiles"].head(120).tolist()
    monkeypatch.setattr(chunked, "PROGRESS_MIN_MOLECULES", 100)
    monkeypatch.setattr(chunked, "CHUNK", 50)  # 120 = 50 + 50 + 20: a partial last chunk
    written = chunked.joined(canonical_smiles, smiles, description="canonical SMILES")
    assert written == canonical_smiles(smiles)
    assert "canonical SMILES" in terminal.getvalue() and "120/120" in terminal.getvalue()


def test_no_bar_below_the_threshold_off_rank_0_or_off_a_terminal(monkeypatch):
    terminal = on_terminal(monkeypatch)
    monkeypatch.setattr(chunked, "PROGRESS_MIN_MOLECULES", 100)
    assert not chunked.shows_progress(99) and chunked.shows_progress(100)
    monkeypatch.setenv("RANK", "1")
    assert not chunked.shows_progress(10**6)
    assert chunked.joined(canonical_smiles, ["CCO"] * 200, description="x") == ["CCO"] * 200
    assert terminal.getvalue() == ""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # redirected: a log file, SLURM, CI
    chunked.joined(canonical_smiles, ["CCO"] * 200, description="x")
    assert terminal.getvalue() == "" and sys.stderr.getvalue() == ""


def test_quiet_console_draws_no_bar(monkeypatch):
    quiet = logging.StreamHandler(on_terminal(monkeypatch))
    quiet.setLevel(logging.WARNING)  # what setup_logging does for --quiet and ranks > 0
    monkeypatch.setattr(log, "handlers", [quiet])
    monkeypatch.setattr(chunked, "PROGRESS_MIN_MOLECULES", 1)
    assert not chunked.shows_progress(10**6)


def test_molecule_data_draws_the_bar_and_keeps_its_digests(monkeypatch, small_csv, tmp_path):
    without = molecule_data(small_csv).digests
    # an empty cache: the canonical SMILES are computed again, under the bar
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path / "empty cache"))
    terminal = on_terminal(monkeypatch)
    monkeypatch.setattr(chunked, "PROGRESS_MIN_MOLECULES", 100)
    monkeypatch.setattr(chunked, "CHUNK", 64)
    assert molecule_data(small_csv).digests == without
    assert "canonical SMILES" in terminal.getvalue() and "200/200" in terminal.getvalue()


def test_what_is_logged_before_the_run_folder_exists_reaches_the_rank_s_file(tmp_path):
    setup_logging(rank=1, quiet=True)
    log.info("start-up: read early.csv in 0.01 s")
    log.warning("warning: early.csv: 2 rows dropped")
    add_log_file(tmp_path, rank=1)
    log.info("writing to the folder")
    lines = (tmp_path / "rank1.log").read_text().splitlines()
    assert [line.split("[rank1] ")[1] for line in lines] == [
        "INFO start-up: read early.csv in 0.01 s",
        "WARNING warning: early.csv: 2 rows dropped",
        "INFO writing to the folder",
    ]
    add_log_file(tmp_path, rank=1)  # a second file gets only what comes after it
    assert len((tmp_path / "rank1.log").read_text().splitlines()) == 3
