"""Scaffold and random splits, the fingerprint baseline, and random SMILES (RDKit)."""

import json

from helpers import BENCHMARKS, FAST_FLAGS, SINGLE, final_lines, run_script
import numpy as np
import pandas as pd
import pytest

from partorch.molecules.chem import canonical_smiles, morgan_fingerprints
from partorch.molecules.splits import scaffold_groups, split_indices
from partorch.molecules.table import read_molecule_csv
from partorch.molecules.tokenizer import split_smiles


def _parsed_bbbp(bbbp_path):
    return read_molecule_csv(bbbp_path, parse=True)


def test_scaffold_split_keeps_scaffolds_apart_and_is_deterministic(bbbp_path):
    table = _parsed_bbbp(bbbp_path)
    classes = table.labels[:, 0].astype(int)
    a = split_indices(len(classes), 1, "scaffold", classes=classes, smiles=table.smiles)
    b = split_indices(
        len(classes), 2, "scaffold", classes=classes, smiles=table.smiles
    )  # the seed does not matter
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("train", "dev", "test"))
    assert sorted(np.concatenate([a.train, a.dev, a.test]).tolist()) == list(
        range(len(table.smiles))
    )
    scaffold_of = {i: g for g, group in enumerate(scaffold_groups(table.smiles)) for i in group}
    seen = [{scaffold_of[i] for i in getattr(a, k)} for k in ("train", "dev", "test")]
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    assert abs(len(a.test) / len(table.smiles) - 0.1) < 0.02


def test_random_split_depends_on_the_seed_only(bbbp_path):
    classes = read_molecule_csv(bbbp_path).labels[:, 0].astype(int)
    a, b, c = (split_indices(len(classes), s, "random", classes=classes) for s in (5, 5, 6))
    assert np.array_equal(a.test, b.test) and not np.array_equal(a.test, c.test)
    assert (len(a.train), len(a.dev), len(a.test)) == (1476, 369, 205)


def test_fingerprints_are_bits_and_empty_for_unparsable():
    rows = morgan_fingerprints(["CCO", "not a molecule(", "c1ccccc1"], bits=256)
    assert rows.shape == (3, 256) and set(np.unique(rows)) <= {0, 1}
    assert rows[0].sum() > 0 and rows[1].sum() == 0


def test_baseline_prints_the_same_final_line_deterministically(tmp_path, bbbp_subset):
    finals = []
    for split in ("stratified", "stratified", "scaffold"):
        result = run_script(
            [
                BENCHMARKS / "baseline_fingerprints.py",
                bbbp_subset,
                "--split",
                split,
                "--trees",
                "50",
                "--output-dir",
                tmp_path / split,
            ],
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        finals.append(final_lines(result.stdout))
    assert len(finals[0]) == 1 and finals[0] == finals[1]
    assert 0.5 < float(finals[0][0].split(": ")[1]) <= 1.0


def test_network_and_forest_see_identical_splits(tmp_path, bbbp_subset):
    flags = ["--split", "scaffold_balanced", "--split-sizes", "0.8,0.1,0.1", "--seed", "5"]
    network = run_script(
        [SINGLE, bbbp_subset, *flags, "--output-dir", tmp_path / "net", *FAST_FLAGS], timeout=200
    )
    assert network.returncode == 0, network.stderr[-2000:]
    forest = run_script(
        [
            BENCHMARKS / "baseline_fingerprints.py",
            bbbp_subset,
            *flags,
            "--trees",
            "20",
            "--output-dir",
            tmp_path / "forest",
        ],
        timeout=120,
    )
    assert forest.returncode == 0, forest.stderr[-2000:]
    saved = [
        json.loads((tmp_path / name / "splits.json").read_text()) for name in ("net", "forest")
    ]
    assert saved[0] == saved[1] and saved[0]["split"] == "scaffold_balanced"
    assert abs(len(saved[0]["test"]) / 298 - 0.1) < 0.05  # 300 rows, 2 that RDKit cannot parse


def test_forest_baseline_on_regression_and_several_tasks(tmp_path, esol_subset, sider_subset):
    esol = run_script(
        [
            BENCHMARKS / "baseline_fingerprints.py",
            esol_subset,
            "--label-column",
            "logSolubility",
            "--split",
            "random",
            "--trees",
            "20",
            "--output-dir",
            tmp_path / "esol",
        ],
        timeout=120,
    )
    assert esol.returncode == 0, esol.stderr[-2000:]
    rmse = float(final_lines(esol.stdout, "RMSE")[0].split(": ")[1])
    metrics = json.loads((tmp_path / "esol" / "metrics.json").read_text())
    assert (
        metrics["task"] == "regression"
        and metrics["test_rmse"] == pytest.approx(rmse, abs=1e-4)
        and rmse < 2.1
    )
    columns = list(pd.read_csv(sider_subset).columns[1:])
    sider = run_script(
        [
            BENCHMARKS / "baseline_fingerprints.py",
            sider_subset,
            "--label-column",
            ",".join(columns),
            "--trees",
            "20",
            "--output-dir",
            tmp_path / "sider",
        ],
        timeout=120,
    )
    assert sider.returncode == 0, sider.stderr[-2000:]
    per_task = json.loads((tmp_path / "sider" / "metrics.json").read_text())["test_metrics"][
        "per_task"
    ]
    scored = [m["roc_auc"] for m in per_task.values() if "roc_auc" in m]
    assert len(per_task) == 27 and len(scored) >= 20  # one forest per column, gaps left out
    assert float(final_lines(sider.stdout)[0].split(": ")[1]) == pytest.approx(
        np.mean(scored), abs=1e-4
    )


def test_augmented_smiles_are_the_same_molecule_reproducible_and_independent_of_the_shard(
    bbbp_path, monkeypatch
):
    from rdkit import Chem

    from partorch.ddp.loaders import get_ddp_dataloader
    from partorch.molecules.chem import augmentation_vocabulary_strings
    import partorch.molecules.datasets
    from partorch.molecules.datasets import AugmentedSmilesDataset
    from partorch.molecules.tokenizer import SmilesTokenizer

    smiles = _parsed_bbbp(bbbp_path).smiles[:200]
    tokenizer = SmilesTokenizer.build(smiles + augmentation_vocabulary_strings(smiles))
    whole = AugmentedSmilesDataset(smiles, np.zeros(200), tokenizer, seed=7)
    rows = list(range(50, 200, 3))  # a split: a subset of the table, named by its rows
    part = AugmentedSmilesDataset(
        [smiles[i] for i in rows], np.zeros(len(rows)), tokenizer, seed=7, keys=rows
    )
    strings = lambda d, items: [tokenizer.decode(d[i][0].tolist()) for i in items]  # noqa: E731
    whole.set_epoch(3)
    part.set_epoch(3)
    rewritten = strings(whole, range(200))
    assert strings(part, range(len(rows))) == [
        rewritten[i] for i in rows
    ]  # a molecule's string: its own
    assert rewritten == strings(whole, range(200))  # drawn again: the same
    assert sum(a != b for a, b in zip(rewritten, smiles)) > 100
    canonical = lambda s: Chem.MolToSmiles(Chem.MolFromSmiles(s))  # noqa: E731
    assert all(canonical(a) == canonical(b) for a, b in zip(rewritten[:50], smiles[:50]))
    whole.set_epoch(4)
    assert sum(a != b for a, b in zip(strings(whole, range(200)), rewritten)) > 100  # a fresh epoch
    whole.set_epoch(None)
    assert strings(whole, range(200)) == smiles
    # a rank rewrites only the molecules of its shard: the cost divides by the world size
    calls = []
    real = partorch.molecules.datasets.random_smiles
    monkeypatch.setattr(
        partorch.molecules.datasets,
        "random_smiles",
        lambda s, rng: calls.append(len(s)) or real(s, rng),
    )
    loader = get_ddp_dataloader(
        rank=1, world_size=2, dataset=whole, batch_size=32, shuffle=True, seed=7
    )
    loader.batch_sampler.set_epoch(5)
    whole.set_epoch(5)
    drawn = sum(len(batch) for batch in loader)
    assert drawn == 100 and sum(calls) == 100


def test_augmented_strings_never_meet_unknown_tokens(bbbp_path):
    from partorch.molecules.chem import augmentation_vocabulary_strings, random_smiles
    from partorch.molecules.tokenizer import SmilesTokenizer

    smiles = read_molecule_csv(bbbp_path).smiles
    tokenizer = SmilesTokenizer.build(smiles + augmentation_vocabulary_strings(smiles))
    unknown = tokenizer.token_to_id["<unk>"]
    for seed in (11, 12):  # streams the vocabulary was not built from
        rewritten = random_smiles(smiles, np.random.default_rng(seed))
        assert not [s for s in rewritten if unknown in tokenizer.encode(s)]


def test_the_augmentation_vocabulary_covers_what_only_the_atom_order_decides():
    from partorch.molecules.chem import augmentation_vocabulary_strings, random_smiles
    from partorch.molecules.tokenizer import SmilesTokenizer

    # no branch, a double bond's geometry written with / only, a stereocentre, a Kekulé ring,
    # a bond between rings a file may leave unwritten (RDKit writes it: -), a dative bond (->)
    smiles = ["CCCO", "F/C=C/Cl", "C[C@H](N)O", "C1=CC=CC=C1", "c1ccccc1c1ccncc1", "[NH3]->[Pt]"]
    tokenizer = SmilesTokenizer.build(smiles + augmentation_vocabulary_strings(smiles))
    rng = np.random.default_rng(3)
    rewritten = [s for _ in range(50) for s in random_smiles(smiles, rng)]
    assert {"(", "\\", "[C@@H]", "c", "-", "<"} <= {t for s in rewritten for t in split_smiles(s)}
    assert not [s for s in rewritten if tokenizer.unknown_tokens(s)]
    # strings RDKit wrote canonically (--smiles-form canonical) need not be written again
    written = canonical_smiles(smiles)
    again, as_given = (
        SmilesTokenizer.build(written + augmentation_vocabulary_strings(written, canonical))
        for canonical in (False, True)
    )
    assert again.tokens == as_given.tokens == tokenizer.tokens


# Out of CI (marker slow). CI covers its core:
# augmented training: test_ddp_correctness's parity test
@pytest.mark.slow
def test_training_with_augmentation_and_test_time_augmentation(tmp_path, bbbp_subset):
    aucs = []
    for name in ("a", "b"):
        result = run_script(
            [
                SINGLE,
                bbbp_subset,
                "--augment",
                "--tta",
                "2",
                "--output-dir",
                tmp_path / name,
                *FAST_FLAGS,
            ],
            timeout=200,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        aucs.append(final_lines(result.stdout))
    assert len(aucs[0]) == 1 and aucs[0] == aucs[1]  # deterministic per seed
