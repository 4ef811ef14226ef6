"""The workshop notebooks execute top to bottom on small settings, and are stored without
outputs."""

from itertools import combinations
import json
import re

from helpers import ROOT
from nbclient import NotebookClient
import nbformat
import pytest

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SMALL_SETTINGS = {
    "PARTORCH_NOTEBOOK_MOLECULES": "300",
    "PARTORCH_NOTEBOOK_EPOCHS": "2",
    "PARTORCH_NOTEBOOK_TRIALS": "2",  # 03: 2 worker processes, one Optuna trial each
    "PARTORCH_NOTEBOOK_WORKERS": "2",
    "PARTORCH_NOTEBOOK_TENSORBOARD": "0",  # 02: no TensorBoard server where nobody can look at it
}


def test_the_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_single_process.ipynb",
        "02_ddp.ipynb",
        "03_parallel_experiments.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_clean(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.get("outputs") and cell.get("execution_count") is None for cell in code), (
        "outputs not stripped"
    )
    # the notebooks use the data that ships with the project, never the workplace's shared folder
    assert "../shared" not in path.read_text()


def test_helpers_beside_the_notebooks_do_not_use_the_shared_folder():
    for helper in (ROOT / "notebooks").glob("*.py"):
        assert "../shared" not in helper.read_text(), helper


@pytest.mark.timeout(400)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch, bbbp_path):  # bbbp_path: skip without the data
    notebook = nbformat.read(path, as_version=4)
    for name, value in SMALL_SETTINGS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PARTORCH_ROOT", str(ROOT))
    # runs, data subsets and the Optuna study land in tmp_path, not in the checkout
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    errors = [
        o
        for cell in notebook.cells
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, "\n".join(line for o in errors for line in o.get("traceback", []))[-3000:]
    CHECKS.get(path.stem, lambda notebook, folder: None)(notebook, tmp_path)


def code_cell(notebook, marker):
    """The one code cell whose source contains `marker`."""
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and marker in cell.source]
    assert len(cells) == 1, f"{len(cells)} code cells contain {marker!r}"
    return cells[0]


def streamed(cell):
    return [o.text for o in cell.outputs if o.output_type == "stream"]


def check_ddp(notebook, folder):
    launch = streamed(code_cell(notebook, "torch.distributed.run"))
    # printed line by line while torchrun ran, not once at the end
    assert len(launch) >= 3, launch
    text = "".join(launch)
    epochs = int(SMALL_SETTINGS["PARTORCH_NOTEBOOK_EPOCHS"])
    # rank 0 tells the story, tagged; its final line comes last; no progress-bar redraws get through
    positions = [text.index(f"[rank0] epoch {e}/{epochs} ") for e in range(1, epochs + 1)]
    positions.append(text.index("\nFinal test ROC AUC: "))
    assert positions == sorted(positions), text
    assert not re.search(r"^\s*\d+%\|", text, re.MULTILINE), text
    assert "Traceback" not in text
    # rank 1 logs to its own file, which the notebook shows
    logs = "".join(streamed(code_cell(notebook, "rank*.log")))
    assert "--- rank1.log" in logs and "[rank1] INFO" in logs, logs
    assert (folder / "runs" / "notebook-ddp" / "metrics.json").exists()
    assert "TensorBoard skipped" in "".join(
        streamed(code_cell(notebook, "PARTORCH_NOTEBOOK_TENSORBOARD"))
    )


def check_experiments(notebook, folder):
    import optuna

    storage = f"sqlite:///{folder / 'optuna_study.db'}"
    assert optuna.study.get_all_study_names(storage) == ["bbbp-rnn"]
    study = optuna.load_study(study_name="bbbp-rnn", storage=storage)
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * int(
        SMALL_SETTINGS["PARTORCH_NOTEBOOK_TRIALS"]
    )
    for trial in trials:
        metrics = json.loads(
            (folder / "runs" / "optuna" / f"trial_{trial.number}" / "metrics.json").read_text()
        )
        assert trial.value == pytest.approx(metrics["best_dev_roc_auc"])  # dev decides
        assert trial.user_attrs["test_roc_auc"] == pytest.approx(
            metrics["test_roc_auc"]
        )  # test: shown only
        assert 3e-4 <= trial.params["lr"] <= 1e-2 and 0 <= trial.params["dropout"] <= 0.4
        assert trial.params["d_model"] in (16, 32, 64)
    # both worker processes ran trials, and trials of different workers ran at the same time
    assert {t.user_attrs["worker"] for t in trials} == {0, 1}
    assert any(
        a.user_attrs["worker"] != b.user_attrs["worker"]
        and a.datetime_start < b.datetime_complete
        and b.datetime_start < a.datetime_complete
        for a, b in combinations(trials, 2)
    )
    best = "".join(streamed(code_cell(notebook, "study.best_trial")))
    assert f"best trial: #{study.best_trial.number} " in best, best


CHECKS = {"02_ddp": check_ddp, "03_parallel_experiments": check_experiments}
