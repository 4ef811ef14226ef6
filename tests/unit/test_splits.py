"""Canonical SMILES, split sizes, the two scaffold splits and splits.json."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from partorch.molecules.chem import canonical_smiles
from partorch.molecules.splits import (
    Splits,
    describe_split,
    parse_sizes,
    repeats_across_parts,
    scaffold_groups,
    split_indices,
    split_molecules,
)
from partorch.molecules.table import DataError, MoleculeTable, read_molecule_csv
from partorch.molecules.tasks import BinaryClassification, Regression


def test_canonical_smiles_removes_the_writing_style():
    kekule, aromatic, reordered = (
        "C1=CC=CC=C1CO",
        "OCc1ccccc1",
        "c1ccc(CO)cc1",
    )  # benzyl alcohol, three ways
    written = canonical_smiles([kekule, aromatic, reordered, "C1CC", "CCO", "CCé", "CC O"])
    assert written[0] == written[1] == written[2] and written[4] == "CCO"
    assert written[3] is None and written[5:] == [
        None,
        None,
    ]  # RDKit alone would read the last two as ethane


def _csv(tmp_path, smiles, labels):
    path = tmp_path / "m.csv"
    pd.DataFrame({"smiles": smiles, "p_np": labels}).to_csv(path, index=False)
    return path


def test_canonical_form_drops_what_rdkit_cannot_parse_and_strict_refuses_it(tmp_path):
    path = _csv(tmp_path, ["C1=CC=CC=C1O", "C1CC", "CCO", "N(C"], [1, 0, 1, 0])
    table = read_molecule_csv(path, smiles_form="canonical")
    assert table.smiles == ["Oc1ccccc1", "CCO"] and table.rows.tolist() == [2, 4]
    assert table.warnings == [
        f"{path}: 2 rows have SMILES that RDKit cannot parse, dropped: rows 3, 5"
    ]
    assert read_molecule_csv(path).smiles == [
        "C1=CC=CC=C1O",
        "C1CC",
        "CCO",
        "N(C",
    ]  # raw: as written
    with pytest.raises(
        DataError, match=r"m.csv: 2 rows have SMILES that RDKit cannot parse: rows 3, 5"
    ):
        read_molecule_csv(path, smiles_form="canonical", strict=True)


@pytest.mark.parametrize(
    "text", ["0.8,0.1", "0.8,0.1,0.2", "0.9,0.1,0", "a,b,c", "nan,0.5,0.5", "1.2,-0.1,-0.1"]
)
def test_split_sizes_are_three_positive_fractions_summing_to_one(text):
    with pytest.raises(ValueError):
        parse_sizes(text)
    assert parse_sizes("0.8,0.1,0.1") == (0.8, 0.1, 0.1)


def test_random_split_takes_the_sizes_asked_for():
    splits = split_indices(1000, 3, "random", sizes=(0.8, 0.1, 0.1))
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (800, 100, 100)
    default = split_indices(
        2050, 3, "random"
    )  # the tutorial's: 10 % test, then 20 % of the rest dev
    assert (len(default.train), len(default.dev), len(default.test)) == (1476, 369, 205)


# Molecules in scaffold groups of 6, 5, 4, 3, 2 and 1, 1, 1: benzene, pyridine, cyclohexane... with
# side chains
SCAFFOLDS = [
    "c1ccccc1",
    "c1ccncc1",
    "C1CCCCC1",
    "C1CCNCC1",
    "c1ccoc1",
    "C1CCC1",
    "c1ccsc1",
    "C1CC1",
]
SIZES = [6, 5, 4, 3, 2, 1, 1, 1]


def _molecules():
    chains = ["C", "CC", "CCC", "CO", "CN", "OC"]
    return [f"{chains[k]}{ring}" for ring, n in zip(SCAFFOLDS, SIZES) for k in range(n)]


def test_scaffold_split_fills_train_dev_test_with_whole_groups_largest_first():
    smiles = _molecules()  # 23 molecules
    assert [len(g) for g in scaffold_groups(smiles)] == sorted(SIZES, reverse=True)
    splits = split_indices(len(smiles), 0, "scaffold", smiles=smiles, sizes=(0.6, 0.2, 0.2))
    # DeepChem's rule, group by group: train while it stays <= 13.8 (6, 5, later 2), else dev while
    # train + dev stays <= 18.4 (4, 3), else test (1, 1, 1)
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (13, 7, 3)
    assert all(
        np.array_equal(
            getattr(splits, k),
            getattr(
                split_indices(len(smiles), 99, "scaffold", smiles=smiles, sizes=(0.6, 0.2, 0.2)), k
            ),
        )
        for k in ("train", "dev", "test")
    )  # the seed plays no part


def test_scaffold_split_breaks_ties_as_deepchem_does():
    # two groups of two: DeepChem's order puts the one whose first molecule comes later first
    smiles = ["Cc1ccccc1", "CCc1ccccc1", "Cc1ccncc1", "CCc1ccncc1", "CC1CC1"]
    splits = split_indices(5, 0, "scaffold", smiles=smiles, sizes=(0.4, 0.4, 0.2))
    assert splits.as_lists() == {"train": [2, 3], "dev": [0, 1], "test": [4]}


def test_balanced_scaffold_split_puts_big_groups_first():
    # one group of 5 (more than half of dev or test: 0.2 * 20 / 2 = 2) and 15 of one molecule each;
    # a plain shuffle would sometimes reach the big group when train is nearly full and send it to
    # test
    smiles = (
        [f"{'C' * (k + 1)}c1ccccc1" for k in range(5)]
        + [f"C1{'C' * k}C1" for k in range(1, 8)]
        + [f"C1{'C' * k}N1" for k in range(1, 9)]
    )
    assert [len(g) for g in scaffold_groups(smiles)][:2] == [5, 1]
    for seed in range(10):
        splits = split_indices(20, seed, "scaffold_balanced", smiles=smiles, sizes=(0.6, 0.2, 0.2))
        assert set(range(5)) <= set(splits.train.tolist()), seed


def _groups_of(splits, smiles):
    scaffold_of = {i: g for g, group in enumerate(scaffold_groups(smiles)) for i in group}
    return [{scaffold_of[int(i)] for i in getattr(splits, k)} for k in ("train", "dev", "test")]


def test_balanced_scaffold_split_varies_with_the_seed_and_keeps_groups_whole():
    smiles = _molecules()  # groups bigger than half of dev or test (0.2 * 23 / 2) go to train first
    drawn = {
        seed: split_indices(
            len(smiles), seed, "scaffold_balanced", smiles=smiles, sizes=(0.6, 0.2, 0.2)
        )
        for seed in range(6)
    }
    assert (
        len({tuple(s.test) for s in drawn.values()}) > 1
    )  # the seed changes which groups land where
    again = split_indices(len(smiles), 4, "scaffold_balanced", smiles=smiles, sizes=(0.6, 0.2, 0.2))
    assert np.array_equal(again.test, drawn[4].test) and np.array_equal(again.train, drawn[4].train)
    for splits in drawn.values():
        train, dev, test = _groups_of(splits, smiles)
        assert not (train & dev or train & test or dev & test)
        assert sorted(np.concatenate([splits.train, splits.dev, splits.test]).tolist()) == list(
            range(len(smiles))
        )
        assert (
            len(splits.train) <= 0.6 * 23
        )  # a group joins train only while train stays within its share


def test_repeats_across_parts_counts_molecules_an_earlier_part_holds():
    # benzene three times, ethanol twice, each copy in another part; methane once
    smiles = ["c1ccccc1", "CCO", "C", "c1ccccc1", "CCO", "c1ccccc1"]
    splits = Splits(train=np.array([0, 1, 2]), dev=np.array([3]), test=np.array([4, 5]))
    assert repeats_across_parts(smiles, splits) == {
        "dev": 1,
        "test": 2,
        "dev_in_train": 1,
        "test_in_train": 2,
        "test_in_dev": 1,
    }


def test_a_scaffold_split_keeps_every_copy_of_a_molecule_in_one_part():
    smiles = _molecules() * 2  # each molecule twice: copies share their scaffold, so their group
    splits = split_indices(len(smiles), 0, "scaffold", smiles=smiles, sizes=(0.6, 0.2, 0.2))
    counts = repeats_across_parts(smiles, splits)
    assert (counts["dev_in_train"], counts["test_in_train"], counts["test_in_dev"]) == (0, 0, 0)
    shuffled = split_indices(len(smiles), 0, "random", sizes=(0.6, 0.2, 0.2))
    assert repeats_across_parts(smiles, shuffled)["test_in_train"] > 0


def test_splits_json_names_the_rows_of_the_file(tmp_path):
    path = _csv(tmp_path, ["CCO", "C1CC", "CCN", "CCC", "CCCl", "c1ccccc1"], [1, 0, 1, 0, 1, 0])
    table = read_molecule_csv(
        path, smiles_form="canonical"
    )  # row 3 dropped: positions and rows now differ
    splits = split_indices(len(table.smiles), 0, "random", sizes=(0.6, 0.2, 0.2))
    saved = describe_split(table, splits, "random", 0, (0.6, 0.2, 0.2))
    assert sorted(saved["train"] + saved["dev"] + saved["test"]) == [2, 4, 5, 6, 7]
    assert saved["test"] == table.rows[splits.test].tolist() and saved["sizes"] == [0.6, 0.2, 0.2]


def test_tasks_score_another_models_predictions_as_their_own():
    probabilities = np.array([[0.0], [0.2], [0.9], [1.0]])
    task = BinaryClassification(["y"])
    assert np.allclose(task.predictions(task.outputs_for(probabilities)), probabilities, atol=1e-6)
    regression = Regression(["y"], mean=[2.0], std=[3.0])
    assert np.allclose(regression.predictions(regression.outputs_for(probabilities)), probabilities)
    targets = np.array([[0.0], [1.0], [1.0], [0.0]])
    assert task.metrics(targets, task.outputs_for(probabilities))["roc_auc"] == pytest.approx(0.5)
    # an overfit model's probabilities far below 1e-7 and near 1 keep their order: no ties
    confident = np.array([[1e-30], [1e-20], [1e-12], [1e-8], [1 - 1e-9], [1 - 1e-12]])
    labels = np.array([[0.0], [1.0], [0.0], [1.0], [0.0], [1.0]])
    logits = task.outputs_for(confident)
    assert np.all(np.diff(logits[:, 0]) > 0) and np.isfinite(logits).all()
    scored = task.metrics(labels, logits)["roc_auc"]
    assert scored == pytest.approx(roc_auc_score(labels[:, 0], confident[:, 0]))  # 7 / 9


def test_a_multiclass_column_is_stratified_whatever_its_class_values():
    labels = np.array([1.0, 2.0, 3.0] * 40)[:, None]  # not 0..K-1: no class may look empty
    table = MoleculeTable(["C"] * 120, labels, ["y"], np.arange(120) + 2, [], "t.csv")
    splits = split_molecules(table, "stratified", 0, "multiclass")
    for part in (splits.train, splits.dev, splits.test):
        counts = np.unique(labels[part, 0], return_counts=True)[1]
        assert len(counts) == 3 and counts.max() - counts.min() <= 1
