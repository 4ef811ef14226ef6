"""The prepared corpus: the arrays hold what the CSV reader gives, a build is atomic, a
folder is reused while its source and options stand and rebuilt when either changes, and
one process per node builds it while the others wait."""

import gzip
import json
from pathlib import Path

from helpers import python_at_once
import numpy as np
import pandas as pd
import pytest

from partorch import DataError
from partorch.ddp.errors import PartorchError
from partorch.molecules import prepared
from partorch.molecules.chem import molecular_descriptors
from partorch.molecules.datasets import SmilesDataset
from partorch.molecules.prepared import (
    PreparedCorpus,
    PreparedDataset,
    PrepareOptions,
    ensure_prepared,
    prepare,
)
from partorch.molecules.table import read_molecule_csv
from partorch.molecules.tokenizer import SmilesTokenizer

LABELLED = PrepareOptions(label_columns=("p_np",))


def test_the_arrays_hold_the_molecules_labels_and_rows_the_csv_reader_gives(bbbp_subset, tmp_path):
    meta = prepare(bbbp_subset, tmp_path / "p", LABELLED)
    table = read_molecule_csv(bbbp_subset, label_columns=["p_np"], smiles_form="canonical")
    corpus = PreparedCorpus(tmp_path / "p")
    assert len(corpus) == meta["molecules"] == len(table.smiles)
    assert [corpus.smiles(i) for i in range(len(corpus))] == table.smiles
    np.testing.assert_array_equal(corpus.labels[:, 0], table.labels[:, 0].astype(np.float32))
    np.testing.assert_array_equal(corpus.rows, table.rows)
    assert meta["tokens"] == int(corpus.lengths().sum()) == len(corpus.tokens)
    assert meta["warnings"] == table.warnings  # the rows dropped, and why
    tokenizer = SmilesTokenizer.build(table.smiles)
    assert corpus.tokenizer.tokens == tokenizer.tokens
    expected = SmilesDataset(table.smiles, table.labels, tokenizer)
    dataset = PreparedDataset(corpus, np.arange(len(corpus)))
    for i in (0, 7, len(corpus) - 1):
        assert dataset[i][0].tolist() == expected[i][0].tolist()
        assert dataset[i][1].tolist() == expected[i][1].tolist()
    np.testing.assert_array_equal(dataset.lengths, expected.lengths)


def test_a_gzipped_csv_without_labels_and_an_upper_case_column_is_read(tmp_path):
    source = tmp_path / "corpus.csv.gz"
    with gzip.open(source, "wt") as f:
        f.write("SMILES\nCCO\nc1ccccc1\nnot a molecule\n")
    meta = prepare(source, tmp_path / "p")
    corpus = PreparedCorpus(tmp_path / "p")
    assert [corpus.smiles(i) for i in range(len(corpus))] == ["CCO", "c1ccccc1"]
    assert corpus.labels.shape == (2, 0)
    assert "rows 4" in meta["warnings"][0] and "cannot parse" in meta["warnings"][0]


def test_a_folder_is_reused_while_source_and_options_stand_and_rebuilt_when_either_changes(
    write_csv, tmp_path, monkeypatch
):
    source = write_csv("smiles,y\nCCO,1\nCCN,0\nCCC,1\n")
    folder = tmp_path / "p"
    first = prepare(source, folder, PrepareOptions(label_columns=("y",)))
    builds = []
    real_build = prepared._build
    monkeypatch.setattr(prepared, "_build", lambda *a: builds.append(1) or real_build(*a))
    assert prepare(source, folder, PrepareOptions(label_columns=("y",))) == first
    assert builds == []
    source.write_text("smiles,y\nCCO,1\nCCN,0\nCCC,1\nCCCl,0\n")
    assert prepare(source, folder, PrepareOptions(label_columns=("y",)))["molecules"] == 4
    assert prepare(source, folder, PrepareOptions(label_columns=()))["label_columns"] == []
    assert len(builds) == 2
    # the cache names a folder by source and options: another option is another folder
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path / "cache"))
    raw = PrepareOptions(label_columns=("y",), smiles_form="raw")
    canonical = PrepareOptions(label_columns=("y",))
    assert prepared.cached_folder(source, raw) != prepared.cached_folder(source, canonical)


def test_a_build_that_fails_leaves_the_earlier_folder_whole_and_no_half_one(
    write_csv, tmp_path, monkeypatch
):
    source = write_csv("smiles,y\nCCO,1\nCCN,0\n")
    folder = tmp_path / "p"
    prepare(source, folder, PrepareOptions(label_columns=("y",)))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    source.write_text("smiles,y\nCCO,1\nCCN,0\nCCC,1\n")

    def full_disk(path, array):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(prepared.np, "save", full_disk)
    with pytest.raises(OSError):
        prepare(source, folder, PrepareOptions(label_columns=("y",)))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "p"]  # no leftovers


def test_a_missing_or_foreign_folder_is_one_clear_error(tmp_path):
    with pytest.raises(DataError, match="not a prepared corpus"):
        PreparedCorpus(tmp_path)
    with pytest.raises(DataError, match="no such file"):
        prepare(tmp_path / "absent.csv", tmp_path / "p")


def test_a_vocabulary_from_an_encoder_is_kept_fixed_or_extended_and_unseen_tokens_counted(
    write_csv, tmp_path
):
    source = write_csv("smiles\nCCO\nCCBr\nC[N+](C)(C)C\n")
    base = ("<pad>", "<unk>", "C", "O", "<mask>")
    fixed = prepare(source, tmp_path / "f", PrepareOptions(vocabulary="fixed", base_tokens=base))
    assert fixed["tokenizer"]["tokens"] == list(base)
    assert fixed["molecules_with_unseen_tokens"] == 2
    assert PreparedCorpus(tmp_path / "f").smiles(1) == "CC<unk>"
    extended = prepare(
        source, tmp_path / "e", PrepareOptions(vocabulary="extend", base_tokens=base)
    )
    assert extended["tokenizer"]["tokens"] == [*base, "(", ")", "Br", "[N+]"]
    assert extended["molecules_with_unseen_tokens"] == 2
    assert PreparedCorpus(tmp_path / "e").smiles(2) == "C[N+](C)(C)C"


def test_descriptors_are_computed_per_kept_molecule_and_standardised_by_the_training_corpus(
    write_csv, tmp_path
):
    source = write_csv("smiles\nCCO\nnot a molecule\nc1ccccc1O\nCCCCCC\n")
    names = ("MolWt", "NumHDonors")
    meta = prepare(source, tmp_path / "p", PrepareOptions(descriptors=names))
    corpus = PreparedCorpus(tmp_path / "p")
    expected = molecular_descriptors(["CCO", "Oc1ccccc1", "CCCCCC"], names)
    np.testing.assert_allclose(corpus.descriptors, expected, rtol=1e-6)
    assert meta["descriptor_columns"] == list(names)
    np.testing.assert_allclose(meta["descriptor_mean"], expected.mean(0), rtol=1e-6)
    targets = PreparedDataset(corpus, [0, 1, 2], descriptors=True)[1][1].numpy()
    np.testing.assert_allclose(
        targets, (expected[1] - expected.mean(0)) / expected.std(0), rtol=1e-5
    )
    # a held-out corpus is scaled by the training corpus's statistics, not its own
    small = write_csv("smiles\nCCO\n", name="small.csv")
    other = prepare(small, tmp_path / "o", PrepareOptions(descriptors=names))
    held_out = PreparedDataset(PreparedCorpus(tmp_path / "o"), [0], True, scale_from=corpus)
    same_molecule = PreparedDataset(corpus, [0], descriptors=True)
    np.testing.assert_allclose(held_out[0][1].numpy(), same_molecule[0][1].numpy(), rtol=1e-6)
    assert other["descriptor_mean"] != meta["descriptor_mean"]
    with pytest.raises(DataError, match="prepare it with --descriptors"):
        PreparedDataset(PreparedCorpus(prepare_plain(source, tmp_path)), [0], descriptors=True)


def test_a_chunk_parses_each_molecule_once_for_its_smiles_and_descriptors(monkeypatch):
    from rdkit import Chem

    parse = Chem.MolFromSmiles
    parsed = []
    monkeypatch.setattr(
        Chem, "MolFromSmiles", lambda s, *how, **more: parsed.append(s) or parse(s, *how, **more)
    )
    given = ["OCC", "C1=CC=CC=C1O", "C1CC", "CCCCCC"]
    chunk = prepared._tokenized_chunk(given, True, ("MolWt", "NumHDonors"))
    assert sorted(parsed) == sorted(given)  # once a molecule, for its SMILES and descriptors
    assert chunk.smiles == ["CCO", "Oc1ccccc1", None, "CCCCCC"]
    monkeypatch.setattr(Chem, "MolFromSmiles", parse)
    expected = molecular_descriptors(
        ["CCO", "Oc1ccccc1", "C1CC", "CCCCCC"], ("MolWt", "NumHDonors")
    )
    np.testing.assert_array_equal(chunk.descriptors, expected)
    assert np.isnan(chunk.descriptors[2]).all()


def test_an_unknown_or_failing_descriptor_is_an_error_or_a_nan():
    with pytest.raises(PartorchError, match="unknown RDKit descriptor"):
        molecular_descriptors(["CCO"], ("MolWt", "NoSuchThing"))
    rows = molecular_descriptors(["CCO", "not a molecule", ""], ("MolWt",))
    assert rows[0, 0] == pytest.approx(46.069, abs=1e-3)
    assert np.isnan(rows[1:]).all()


def prepare_plain(source, tmp_path):
    prepare(source, tmp_path / "plain")
    return tmp_path / "plain"


BUILD_ONCE = """
import logging, sys
from partorch.molecules.prepared import PrepareOptions, ensure_prepared
logging.getLogger("partorch").addHandler(logging.StreamHandler(sys.stdout))
logging.getLogger("partorch").setLevel(logging.INFO)
print(ensure_prepared(sys.argv[1], PrepareOptions(label_columns=("p_np",)), workers=1))
"""


def test_processes_of_one_node_starting_together_build_the_corpus_once(bbbp_path, tmp_path):
    stdouts = python_at_once(BUILD_ONCE, [bbbp_path], {"PARTORCH_CACHE": str(tmp_path / "cache")})
    assert sum("start-up: prepared" in out for out in stdouts) == 1, stdouts
    assert sum("is up to date" in out for out in stdouts) == 2, stdouts
    folders = {out.strip().splitlines()[-1] for out in stdouts}
    assert len(folders) == 1
    folder = Path(folders.pop())
    assert folder.parent == tmp_path / "cache" / "prepared"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["molecules"] == len(pd.read_csv(bbbp_path)) - 11  # RDKit cannot parse 11


def test_the_cache_folder_is_where_the_environment_says(monkeypatch, tmp_path, bbbp_subset):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path / "mine"))
    folder = ensure_prepared(bbbp_subset, LABELLED)
    assert folder.parent == tmp_path / "mine" / "prepared" and (folder / "meta.json").is_file()
    monkeypatch.delenv("PARTORCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert prepared.cache_root() == tmp_path / "xdg" / "partorch"
