"""benchmarks/accuracy.py: runs its grid for real (the forest cells: seconds
each), resumes, records every run in its ledger and writes the tables from it."""

import json
import re
import shutil
import statistics
import sys

from helpers import BENCHMARKS, FAST_FLAGS, ROOT, SCRIPTS, SINGLE, run_script
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from partorch.molecules.chem import canonical_smiles

REPORT = BENCHMARKS / "accuracy.py"
CELL = "BBBP/stratified_0.72-0.18-0.1"
SCAFFOLD = "BBBP/scaffold_0.8-0.1-0.1"
pytestmark = pytest.mark.benchmark  # a benchmark script end to end, as test_benchmark.py's


@pytest.mark.timeout(300)
def test_the_report_runs_its_grid_resumes_and_compares_on_identical_splits(tmp_path):
    runs, doc, ledger = tmp_path / "runs", tmp_path / "accuracy.md", tmp_path / "ledger.json"
    flags = ["--seeds", "1", "2", "--runs", runs, "--doc", doc, "--ledger", ledger]
    first = run_script([REPORT, "--only", f"{CELL}/forest", *flags], timeout=280)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.count("running ") == 2
    forest = [
        json.loads((runs / CELL / "forest_canonical" / f"seed_{s}" / "metrics.json").read_text())[
            "test_roc_auc"
        ]
        for s in (1, 2)
    ]
    text = doc.read_text()
    row = (
        f"| stratified 72/18/10 | forest | 1, 2 | {statistics.mean(forest):.3f} +- "
        f"{statistics.stdev(forest):.3f} |"
    )
    assert row in text
    assert (
        "- BBBP stratified 72/18/10, network, canonical SMILES: seeds 1, 2" in text
    )  # not run yet, and said so
    repeated = [
        _test_molecules_in_train(runs / CELL / "forest_canonical" / f"seed_{s}") for s in (1, 2)
    ]
    assert max(repeated) > 0  # BBBP gives some molecules twice: a stratified split parts them
    counts = f"{repeated[0]}" if repeated[0] == repeated[1] else f"{repeated[0]}, {repeated[1]}"
    assert (
        "- stratified 72/18/10, the same molecule in two parts (seeds 1, 2): "
        f"{counts} of 204 test molecules are also in train" in text
    )

    again = run_script([REPORT, "--only", f"{CELL}/forest", *flags], timeout=60)
    assert again.returncode == 0 and "running " not in again.stdout  # done runs are not run again
    listing = run_script([REPORT, "--list", *flags], timeout=60).stdout
    assert sum(line.startswith("done") for line in listing.splitlines()) == 2

    # network runs as a training run leaves them: better than the forest by 0.2 on the same splits,
    # and two recipes
    for seed, score in zip((1, 2), forest):
        _fake_network_run(runs, seed, score + 0.2)
        _fake_network_run(runs, seed, score - 0.3, recipe="large-augment", dev=0.85, seconds=120)
        _fake_network_run(runs, seed, score - 0.3, recipe="large-long", dev=0.95, seconds=300)
    done = run_script(
        [REPORT, "--write-only", "--recipes", "large-augment", "large-long", *flags], timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "- stratified 72/18/10: network better by 0.200" in doc.read_text()
    assert (
        "- stratified 72/18/10, large-augment: forest better by 0.300; on dev, -0.050 against the "
        "default network's mean (seeds 1, 2)" in doc.read_text()
    )
    assert "| stratified 72/18/10 | network, large-augment | 1, 2 |" in doc.read_text()
    # the default is chosen by dev, whatever test says, with its cost beside it
    assert (
        "- **large-augment** (`--d-model 128 --num-layers 3 --augment --tta 10`): BBBP stratified "
        "72/18/10 -0.050 (2 seeds; 2.0 min a run, the defaults 1.0). lowers dev on BBBP stratified "
        "72/18/10: stays a flag." in doc.read_text()
    )
    assert (
        "- **large-long** (`--d-model 128 --num-layers 3 --epochs 100 --patience 20`): BBBP "
        "stratified 72/18/10 +0.050 (2 seeds; 5.0 min a run, the defaults 1.0). raises dev "
        "wherever compared (1 of the grid's 3 splits): a candidate for the default."
        in doc.read_text()
    )

    # the ledger keeps every figure: the tables survive the run folders, and nothing is run again
    kept = json.loads(ledger.read_text())
    assert sorted(kept) == sorted(
        f"{CELL}/{model}/seed_{s}"
        for s in (1, 2)
        for model in (
            "forest_canonical",
            "network_canonical",
            "network_canonical_large-augment",
            "network_canonical_large-long",
            "repeats",  # counted once a split and seed, whichever models ran on it
        )
    )
    assert [kept[f"{CELL}/forest_canonical/seed_{s}"]["test"] for s in (1, 2)] == forest
    assert all(
        0 < kept[f"{CELL}/forest_canonical/seed_{s}"]["seconds"] < 300 for s in (1, 2)
    )  # the run's own clock
    before = doc.read_text()
    shutil.rmtree(runs)
    moved = run_script(
        [REPORT, "--only", f"{CELL}/forest", "--recipes", "large-augment", "large-long", *flags],
        timeout=60,
    )
    assert moved.returncode == 0 and "running " not in moved.stdout, moved.stderr
    assert doc.read_text() == before

    # a network run redone on another split than the one the ledger recorded for the forest is
    # refused
    _fake_network_run(runs, 2, forest[1] + 0.2, forest_splits=False)
    before = doc.read_text()
    refused = run_script([REPORT, "--write-only", *flags], timeout=60)
    assert refused.returncode != 0
    assert "stratified seed 2: the network and the forest saw different splits" in refused.stderr
    assert doc.read_text() == before  # the last good report stays whole

    # the repeats are counted on the split drawn again, which must be the one the runs recorded
    entries = json.loads(ledger.read_text())
    del entries[f"{CELL}/repeats/seed_1"]
    entries[f"{CELL}/forest_canonical/seed_1"]["split_sha256"] = "0" * 64
    ledger.write_text(json.dumps(entries))
    redrawn = run_script([REPORT, "--write-only", *flags], timeout=60)
    assert redrawn.returncode != 0
    assert f"error: {CELL}/forest_canonical/seed_1: the split drawn again" in redrawn.stderr
    assert doc.read_text() == before


def _test_molecules_in_train(folder):
    """The test molecules whose canonical SMILES a train molecule shares, from a run's
    splits.json (rows of the file as an editor numbers them: the header is row 1)."""
    rows = json.loads((folder / "splits.json").read_text())
    smiles = pd.read_csv(ROOT / "dataset" / "BBBP.csv")["smiles"].tolist()

    def canonical(part):
        return canonical_smiles([smiles[row - 2] for row in rows[part]])

    train = set(canonical("train"))
    return sum(molecule in train for molecule in canonical("test"))


def _fake_network_run(runs, seed, score, recipe=None, forest_splits=True, dev=0.9, seconds=60):
    """A finished network run's folder; its splits.json the forest's, or (forest_splits=False) a
    made-up one."""
    forest = runs / CELL / "forest_canonical" / f"seed_{seed}"
    network = (
        runs / CELL / ("network_canonical" + (f"_{recipe}" if recipe else "")) / f"seed_{seed}"
    )
    network.mkdir(parents=True)
    made_up = json.dumps({"train": [0], "dev": [1], "test": [2]})
    splits = (forest / "splits.json").read_text() if forest_splits else made_up
    (network / "splits.json").write_text(splits)
    (network / "metrics.json").write_text(
        json.dumps(
            {
                "test_roc_auc": score,
                "best_dev_roc_auc": dev,
                "best_epoch": 7,
                "wall_seconds": seconds,
                "task": "classification",
                "label_columns": ["p_np"],
            }
        )
    )


@pytest.mark.timeout(480)
def test_the_report_scores_the_ensemble_of_seeds_where_the_split_does_not_depend_on_the_seed(
    tmp_path,
):
    runs, doc, ledger = tmp_path / "runs", tmp_path / "accuracy.md", tmp_path / "ledger.json"
    folders = [runs / SCAFFOLD / "network_canonical" / f"seed_{seed}" for seed in (1, 2)]
    for seed, folder in zip(
        (1, 2), folders
    ):  # small networks, trained for real where the report keeps its runs
        # One thread: the single-process script takes every core by default, and beside the other
        # test worker's torchrun processes its spinning threads ran past the time limit.
        trained = run_script(
            [
                SINGLE,
                ROOT / "dataset" / "BBBP.csv",
                "--split",
                "scaffold",
                "--split-sizes",
                "0.8,0.1,0.1",
                "--seed",
                seed,
                "--output-dir",
                folder,
                *FAST_FLAGS,
                "--threads",
                "1",
            ],
            timeout=180,
        )
        assert trained.returncode == 0, trained.stderr[-2000:]
    written = run_script(
        [
            REPORT,
            "--write-only",
            "--seeds",
            "1",
            "2",
            "--runs",
            runs,
            "--doc",
            doc,
            "--ledger",
            ledger,
        ],
        timeout=120,
    )
    assert written.returncode == 0, written.stderr[-2000:]

    ensemble = json.loads(ledger.read_text())[f"{SCAFFOLD}/network_canonical/ensemble_of_seeds_1-2"]
    # the same figure from the two models' own predictions, averaged here
    bbbp = pd.read_csv(ROOT / "dataset" / "BBBP.csv", dtype=str, keep_default_na=False)
    test_rows = json.loads((folders[0] / "splits.json").read_text())["test"]
    test = bbbp.iloc[[row - 2 for row in test_rows]]
    test.to_csv(tmp_path / "test.csv", index=False)
    each = []
    for folder in folders:
        predicted = run_script(
            [SCRIPTS / "predict.py", folder, tmp_path / "test.csv", "--output", tmp_path / "p.csv"]
        )
        assert predicted.returncode == 0, predicted.stderr
        each.append(pd.read_csv(tmp_path / "p.csv")["p_np"].to_numpy())
        own = json.loads((folder / "metrics.json").read_text())["test_roc_auc"]
        assert roc_auc_score(test["p_np"].astype(int), each[-1]) == pytest.approx(
            own, abs=1e-4
        )  # the run's test rows
    assert not (each[0] == each[1]).all()
    assert ensemble["test"] == pytest.approx(
        roc_auc_score(test["p_np"].astype(int), (each[0] + each[1]) / 2), abs=1e-4
    )
    assert ensemble["seeds"] == [1, 2] and 0 < ensemble["dev"] <= 1
    assert (
        f"| scaffold (DeepChem, seed-independent) 80/10/10 | network, ensemble of 2 seeds | 1, 2 | "
        f"{ensemble['test']:.3f} | - | {ensemble['dev']:.3f} |" in doc.read_text()
    )

    # each seed's predictions are kept beside the ledger: the ensemble is scored again from them
    # alone, with the run folders and the data gone (seeds run on different machines)
    kept = [
        tmp_path / "ledger_predictions" / SCAFFOLD / "network_canonical" / f"seed_{seed}.json.gz"
        for seed in (1, 2)
    ]
    assert all(path.exists() for path in kept)
    # a run redone in its folder since its predictions were kept (its ledger entry is older): kept
    # again
    original = kept[1].read_bytes()
    shutil.copy(kept[0], kept[1])
    entries = json.loads(ledger.read_text())
    entries[f"{SCAFFOLD}/network_canonical/seed_2"]["seconds"] += 1
    ledger.write_text(json.dumps(entries))
    redone = run_script(
        [
            REPORT,
            "--write-only",
            "--seeds",
            "1",
            "2",
            "--runs",
            runs,
            "--doc",
            doc,
            "--ledger",
            ledger,
        ],
        timeout=120,
    )
    assert redone.returncode == 0, redone.stderr[-2000:]
    assert (
        kept[1].read_bytes() == original
    )  # the same model predicts the same bytes (gzip without a time stamp)
    shutil.rmtree(runs)
    entries = json.loads(ledger.read_text())
    del entries[f"{SCAFFOLD}/network_canonical/ensemble_of_seeds_1-2"]
    ledger.write_text(json.dumps(entries))
    empty = tmp_path / "empty"
    empty.mkdir()
    flags = [
        "--write-only",
        "--seeds",
        "1",
        "2",
        "--runs",
        runs,
        "--doc",
        doc,
        "--ledger",
        ledger,
        "--data-dir",
        empty,
    ]
    again = run_script([REPORT, *flags], timeout=60)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (
        json.loads(ledger.read_text())[f"{SCAFFOLD}/network_canonical/ensemble_of_seeds_1-2"]
        == ensemble
    )

    # a kept file that is not the ledger's run (left by a run redone since) is refused, not averaged
    entries = json.loads(ledger.read_text())
    del entries[f"{SCAFFOLD}/network_canonical/ensemble_of_seeds_1-2"]
    ledger.write_text(json.dumps(entries))
    shutil.copy(kept[0], kept[1])
    before = doc.read_text()
    refused = run_script([REPORT, *flags], timeout=60)
    assert refused.returncode != 0
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: {kept[1]}: its test roc_auc ")
    assert line.endswith(
        f" is not the ledger's {entries[f'{SCAFFOLD}/network_canonical/seed_2']['test']:.4f} for "
        f"{SCAFFOLD}/network_canonical/seed_2; delete the file, or redo the run"
    )
    assert doc.read_text() == before

    # with a seed's predictions missing (its run kept none, its folder is gone) the ensemble is left
    # out, and said so
    kept[1].unlink()
    partial = run_script([REPORT, *flags], timeout=60)
    assert partial.returncode == 0, partial.stderr[-2000:]
    assert (
        f"{SCAFFOLD}/network_canonical/ensemble_of_seeds_1-2: not scored: "
        "no predictions kept for seed 2 " in partial.stdout
    )
    assert "network, ensemble of" not in doc.read_text()


@pytest.mark.timeout(120)
def test_the_committed_report_is_what_its_command_writes_from_the_committed_ledger(tmp_path):
    """docs/accuracy.md's figures come from the ledger by its own command, not from a hand edit: the
    command named in its first lines, run with --write-only on a copy of the ledger, writes the same
    text again."""
    committed = (ROOT / "docs" / "accuracy.md").read_text()
    command = (
        committed.split("Written by `python benchmarks/accuracy.py", 1)[1].split("`", 1)[0].split()
    )
    ledger, doc, empty = tmp_path / "ledger.json", tmp_path / "accuracy.md", tmp_path / "empty"
    empty.mkdir()
    shutil.copy(ROOT / "docs" / "accuracy_runs.json", ledger)
    # no run folders and no placed data here: the tables must come from the ledger alone
    result = run_script(
        [
            REPORT,
            *command,
            "--write-only",
            "--ledger",
            ledger,
            "--doc",
            doc,
            "--runs",
            empty,
            "--data-dir",
            empty,
        ],
        timeout=100,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert ledger.read_bytes() == (ROOT / "docs" / "accuracy_runs.json").read_bytes()
    written = re.sub(
        r"recorded in `[^`]*ledger.json`",
        "recorded in `docs/accuracy_runs.json`",
        doc.read_text(),
        count=1,
    )
    assert written == committed


@pytest.mark.timeout(200)
def test_chemprop_runs_on_the_same_split_and_joins_the_tables(tmp_path):
    """The chemprop cells through benchmarks/baseline_chemprop.py, with a stand-in for chemprop's
    command: the same molecules and split as the forest's, its predictions scored by partorch's
    metrics, its row in the table."""
    runs, doc, ledger = tmp_path / "runs", tmp_path / "accuracy.md", tmp_path / "ledger.json"
    fake = tmp_path / "chemprop"
    fake.write_text(
        f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests/integration/fake_chemprop.py"} "$@"\n'
    )
    fake.chmod(0o755)
    flags = ["--seeds", "1", "--runs", runs, "--doc", doc, "--ledger", ledger, "--chemprop", fake]
    result = run_script([REPORT, "--only", f"{CELL}/forest", f"{CELL}/chemprop", *flags])
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("running ") == 2
    folders = {
        model: runs / CELL / f"{model}_canonical" / "seed_1" for model in ("forest", "chemprop")
    }
    splits = {model: json.loads((f / "splits.json").read_text()) for model, f in folders.items()}
    assert splits["chemprop"] == splits["forest"]
    # the stand-in predicts len(SMILES) / 200: scored here independently of the report
    test = pd.read_csv(ROOT / "dataset" / "BBBP.csv").iloc[
        [row - 2 for row in splits["forest"]["test"]]
    ]
    lengths = [len(s) / 200 for s in canonical_smiles(test["smiles"].tolist())]
    metrics = json.loads((folders["chemprop"] / "metrics.json").read_text())
    assert metrics["test_roc_auc"] == pytest.approx(roc_auc_score(test["p_np"], lengths), abs=1e-9)
    text = doc.read_text()
    assert f"| stratified 72/18/10 | chemprop | 1 | {metrics['test_roc_auc']:.3f} |" in text
    assert "--chemprop CHEMPROP" in text
