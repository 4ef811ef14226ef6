"""scripts/accuracy_report.py: runs its grid for real (the forest cells: seconds
each), resumes, and writes the tables from the runs' own files."""
import json
import statistics

import pytest

from helpers import SCRIPTS, run_script

REPORT = SCRIPTS / "accuracy_report.py"
CELL = "BBBP/stratified_0.72-0.18-0.1"


@pytest.mark.timeout(300)
def test_the_report_runs_its_grid_resumes_and_compares_on_identical_splits(tmp_path):
    runs, doc = tmp_path / "runs", tmp_path / "accuracy.md"
    flags = ["--seeds", "1", "2", "--runs", runs, "--doc", doc]
    first = run_script([REPORT, "--only", f"{CELL}/forest", *flags], timeout=280)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.count("running ") == 2
    forest = [json.loads((runs / CELL / "forest_canonical" / f"seed_{s}" / "metrics.json").read_text())["test_roc_auc"]
              for s in (1, 2)]
    text = doc.read_text()
    row = f"| stratified 72/18/10 | forest | 1, 2 | {statistics.mean(forest):.3f} +- {statistics.stdev(forest):.3f} |"
    assert row in text
    assert "- BBBP stratified 72/18/10, network, canonical SMILES: seeds 1, 2" in text  # not run yet, and said so

    again = run_script([REPORT, "--only", f"{CELL}/forest", *flags], timeout=60)
    assert again.returncode == 0 and "running " not in again.stdout  # done runs are not run again
    listing = run_script([REPORT, "--list", *flags], timeout=60).stdout
    assert sum(line.startswith("done") for line in listing.splitlines()) == 2

    # two network runs, as a training run leaves them: better than the forest by 0.2 on the same splits
    for seed, score in zip((1, 2), forest):
        _fake_network_run(runs, seed, score + 0.2)
    done = run_script([REPORT, "--write-only", *flags], timeout=60)
    assert done.returncode == 0, done.stderr
    assert "- stratified 72/18/10: network better by 0.200" in doc.read_text()

    splits = runs / CELL / "network_canonical" / "seed_2" / "splits.json"
    splits.write_text(json.dumps({**json.loads(splits.read_text()), "test": [2, 3]}))
    before = doc.read_text()
    refused = run_script([REPORT, "--write-only", *flags], timeout=60)
    assert refused.returncode != 0
    assert "stratified seed 2: the network and the forest saw different splits" in refused.stderr
    assert doc.read_text() == before  # the last good report stays whole


def _fake_network_run(runs, seed, score):
    forest, network = (runs / CELL / f"{model}_canonical" / f"seed_{seed}" for model in ("forest", "network"))
    network.mkdir(parents=True)
    (network / "splits.json").write_text((forest / "splits.json").read_text())
    (network / "metrics.json").write_text(json.dumps({"test_roc_auc": score, "best_epoch": 7, "task": "classification",
                                                      "label_columns": ["p_np"]}))
