"""predict.py over an ensemble of model folders: mean and standard deviation, CSV and Parquet."""

import shutil

from helpers import FAST_FLAGS, SCRIPTS, SINGLE, error_lines, run_script, with_flag
import numpy as np
import pandas as pd
import pytest
import torch

PREDICT = SCRIPTS / "predict.py"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory, bbbp_subset):
    """Three model folders that predict differently, from one short training: the
    others are its copies with perturbed weights (three trainings would cost CI minutes)."""
    root = tmp_path_factory.mktemp("seeds")
    flags = ["--output-dir", root / "seed_1", "--tokenizer", "bytes"]
    trained = run_script([SINGLE, bbbp_subset, *flags, *with_flag(FAST_FLAGS, "--epochs", 1)])
    assert trained.returncode == 0, trained.stderr[-2000:]
    folders = [root / "seed_1"]
    for seed in (2, 3):
        folder = root / f"seed_{seed}"
        folder.mkdir()
        for name in ("best_model.pt", "hparams.json", "task.json", "tokenizer.json"):
            shutil.copy(root / "seed_1" / name, folder / name)
        _perturb(folder / "best_model.pt", seed)
        folders.append(folder)
    return folders


def _perturb(path, seed):
    generator = torch.Generator().manual_seed(seed)
    state = torch.load(path, weights_only=True)
    for name, tensor in state.items():
        if tensor.is_floating_point():
            state[name] = tensor + 0.1 * torch.randn(tensor.shape, generator=generator)
    torch.save(state, path)


@pytest.fixture(scope="module")
def molecules(tmp_path_factory, bbbp_subset):
    """Twelve molecules, the fourth one no model can read."""
    frame = pd.read_csv(bbbp_subset).head(12)[["smiles"]]
    frame.loc[3, "smiles"] = "CCé"
    path = tmp_path_factory.mktemp("molecules") / "in.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def ensemble_csv(tmp_path_factory, seeds, molecules):
    return _predict(tmp_path_factory.mktemp("ensemble"), seeds, molecules, "ensemble.csv")


def _predict(tmp_path, folders, molecules, name):
    output = tmp_path / name
    result = run_script([PREDICT, *folders, molecules, "--output", output])
    assert result.returncode == 0, result.stderr
    assert "row 5: RDKit cannot parse 'CCé'" in result.stderr
    return output


@pytest.mark.timeout(200)
def test_an_ensemble_writes_each_column_s_mean_and_standard_deviation(
    tmp_path, seeds, molecules, ensemble_csv
):
    alone = [pd.read_csv(_predict(tmp_path, [f], molecules, f"{f.name}.csv")) for f in seeds]
    assert all(list(frame.columns) == ["smiles", "p_np"] for frame in alone)
    singles = np.stack([frame["p_np"].to_numpy() for frame in alone])
    assert np.nanmax(np.abs(singles[0] - singles[1])) > 1e-3  # the models genuinely differ

    ensemble = pd.read_csv(ensemble_csv)
    assert list(ensemble.columns) == ["smiles", "p_np", "p_np_std"]
    assert list(ensemble["smiles"]) == list(alone[0]["smiles"])
    readable = np.arange(len(ensemble)) != 3
    np.testing.assert_allclose(ensemble["p_np"][readable], singles.mean(0)[readable], atol=1e-6)
    np.testing.assert_allclose(ensemble["p_np_std"][readable], singles.std(0)[readable], atol=1e-6)
    assert ensemble.loc[3, ["p_np", "p_np_std"]].isna().all()


@pytest.mark.timeout(200)
def test_parquet_output_holds_what_the_csv_output_does(tmp_path, seeds, molecules, ensemble_csv):
    csv = pd.read_csv(ensemble_csv)
    parquet = pd.read_parquet(_predict(tmp_path, seeds, molecules, "p.parquet"))
    pd.testing.assert_frame_equal(parquet, csv, rtol=1e-9)  # CSV's cells hold 10 digits

    nowhere = tmp_path / "missing" / "p.parquet"
    refused = run_script([PREDICT, *seeds, molecules, "--output", nowhere])
    assert refused.returncode == 2 and error_lines(refused.stderr) == [
        f"error: --output {nowhere}: cannot write in {nowhere.parent}"
    ]
