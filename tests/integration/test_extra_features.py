"""--extra-features and --preset for real: a run under torchrun saves its fitted features
beside the model and scripts/predict.py computes the same ones (it reproduces the run's own test
ROC AUC); --preset accurate fine-tunes the shipped encoder, for classification and regression,
and its config.yaml says what it set; predict.py reproduces its test score too."""

import json

from helpers import DDP, FAST_FLAGS, ROOT, error_lines, final_lines, our_traceback, run_script
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
import yaml

from partorch.molecules.chem import DESCRIPTORS

PREDICT = ROOT / "scripts" / "predict.py"


@pytest.fixture(scope="module")
def featured_run(tmp_path_factory, bbbp_subset):
    out = tmp_path_factory.mktemp("features") / "run"
    flags = [*FAST_FLAGS, "--extra-features", "rdkit2d", "--feature-dropout", "0.3"]
    flags += ["--head-size", "24"]  # not the hidden size: predict.py must build this head
    flags += ["--output-dir", out]
    result = run_script([DDP, bbbp_subset, *flags], nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(final_lines(result.stdout)) == 1
    return out


def _test_rows(run, csv, folder):
    """The run's test molecules as a CSV of their own (splits.json numbers rows as an editor)."""
    rows = json.loads((run / "splits.json").read_text())["test"]
    frame = pd.read_csv(csv).iloc[[row - 2 for row in rows]]
    path = folder / "test.csv"
    frame.to_csv(path, index=False)
    return frame, path


def _predict(run, path, output):
    result = run_script([PREDICT, run, path, "--output", output])
    assert result.returncode == 0, result.stderr[-2000:]
    return pd.read_csv(output)["p_np"]


def test_predict_computes_the_features_the_model_was_trained_with(
    featured_run, bbbp_subset, tmp_path
):
    saved = json.loads((featured_run / "extra_features.json").read_text())
    assert saved["kind"] == "rdkit2d" and saved["columns"] == list(DESCRIPTORS)
    hparams = json.loads((featured_run / "hparams.json").read_text())
    assert hparams["extra_features"] == "rdkit2d"
    assert hparams["model"]["extra_features"] == len(DESCRIPTORS)
    assert hparams["model"]["feature_dropout"] == 0.3  # training only: predict.py drops none
    assert hparams["model"]["head_size"] == 24 != hparams["model"]["d_model"]
    frame, path = _test_rows(featured_run, bbbp_subset, tmp_path)
    predicted = _predict(featured_run, path, tmp_path / "p.csv")
    own = json.loads((featured_run / "metrics.json").read_text())["test_roc_auc"]
    assert roc_auc_score(frame["p_np"], predicted) == pytest.approx(own, abs=1e-6)
    # the statistics saved are the ones used: other means give other predictions
    saved["mean"] = [m + 1.0 for m in saved["mean"]]
    (featured_run / "extra_features.json").write_text(json.dumps(saved))
    try:
        shifted = _predict(featured_run, path, tmp_path / "shifted.csv")
    finally:
        saved["mean"] = [m - 1.0 for m in saved["mean"]]
        (featured_run / "extra_features.json").write_text(json.dumps(saved))
    assert (shifted - predicted).abs().max() > 1e-4


def test_a_model_folder_without_its_features_is_one_error(featured_run, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in featured_run.iterdir():
        if path.is_file() and path.name != "extra_features.json":
            (copy / path.name).write_bytes(path.read_bytes())
    result = run_script([PREDICT, copy, "-"], timeout=60)
    assert result.returncode != 0 and not our_traceback(result.stderr)
    assert error_lines(result.stderr) == [
        f"error: {copy}: its model reads {len(DESCRIPTORS)} extra features, its "
        "extra_features.json describes none"
    ]


@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_preset_accurate_fine_tunes_the_shipped_encoder(kind, bbbp_subset, tmp_path):
    data = bbbp_subset
    if kind == "regression":  # a numeric label the SMILES determine: the string's length
        frame = pd.read_csv(bbbp_subset)
        frame["length"] = frame["smiles"].str.len() / 10
        data = tmp_path / "lengths.csv"
        frame[["smiles", "length"]].to_csv(data, index=False)
    label = ["--label-column", "length"] if kind == "regression" else []
    out = tmp_path / "run"
    flags = ["--preset", "accurate", "--epochs", "1", "--batch-size", "64", "--quiet"]
    result = run_script([DDP, data, *label, *flags, "--output-dir", out], nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    metric = "RMSE" if kind == "regression" else "ROC AUC"
    assert len(final_lines(result.stdout, metric)) == 1
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["preset"] == "accurate" and config["augment"] and config["patience"] == 20
    assert config["extra-features"] == "rdkit2d-full+morgan"
    assert config["epochs"] == 1  # the command line's
    assert config["init-from"] == str(ROOT / "models" / "moses_descriptors")
    model = json.loads((out / "hparams.json").read_text())["model"]
    shipped = json.loads((ROOT / "models" / "moses_descriptors" / "hparams.json").read_text())
    assert model["d_model"] == shipped["model"]["d_model"]  # the encoder's sizes, not the flags'
    if kind == "classification":  # all of RDKit's descriptors, computed again by predict.py
        frame, path = _test_rows(out, data, tmp_path)
        predicted = _predict(out, path, tmp_path / "p.csv")
        own = json.loads((out / "metrics.json").read_text())["test_roc_auc"]
        assert roc_auc_score(frame["p_np"], predicted) == pytest.approx(own, abs=1e-6)
