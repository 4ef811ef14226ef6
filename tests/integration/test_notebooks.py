"""The workshop notebooks execute top to bottom on small settings, and are stored without outputs."""
import nbformat
from nbclient import NotebookClient
import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_single_process.ipynb", "02_ddp.ipynb", "03_parallel_experiments.ipynb"]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch, bbbp_path):  # bbbp_path: skip without the data
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "outputs not stripped"
    monkeypatch.setenv("PARTORCH_NOTEBOOK_MOLECULES", "300")
    monkeypatch.setenv("PARTORCH_NOTEBOOK_EPOCHS", "2")
    monkeypatch.setenv("PARTORCH_ROOT", str(ROOT))
    # runs and data subsets land in tmp_path, not in the checkout
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
