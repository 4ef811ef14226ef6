"""--extra-features' parts: features fitted on the training split only, saved and read back,
carried through the datasets' batches, and read by the model's head."""

import io

from helpers import count_calls, python_at_once
import numpy as np
import pytest
import torch

from partorch import PartorchError
from partorch.ddp import files
from partorch.molecules import chunked
from partorch.molecules import features as features_module
from partorch.molecules.chem import DESCRIPTORS, all_descriptor_names, molecular_descriptors
from partorch.molecules.datasets import smiles_dataset
from partorch.molecules.features import MORGAN_BITS, MoleculeFeatures, features_from_dict
from partorch.molecules.rnn import RNNPredictor
from partorch.molecules.tokenizer import SmilesTokenizer

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "not a molecule", "OCC(O)CO"]


def test_descriptors_are_standardised_with_the_training_split_s_statistics_only():
    train = [0, 1, 2]
    features, raw = MoleculeFeatures.fit("rdkit2d", SMILES, train)
    assert features.columns == list(DESCRIPTORS) and raw.shape == (len(SMILES), len(DESCRIPTORS))
    assert np.allclose(features.mean, raw[train].mean(axis=0))
    values = features.transform(raw)
    assert values.dtype == np.float32
    assert np.allclose(values[train].mean(axis=0), 0, atol=1e-5)  # centred on train...
    assert not np.allclose(values[3:].mean(axis=0), 0, atol=1e-3)  # ...not on the others
    # a molecule RDKit cannot read gets the training mean (0) in every column, not NaN
    assert np.isfinite(values).all() and np.all(values[4] == 0)
    assert np.array_equal(features.compute(SMILES), values)  # compute = transform(raw)


def test_morgan_features_are_log_counts_left_unscaled():
    features, raw = MoleculeFeatures.fit("morgan", SMILES, [0, 1])
    assert len(features) == MORGAN_BITS and raw.shape == (len(SMILES), MORGAN_BITS)
    values = features.compute(SMILES)
    assert values.dtype == np.float16  # half the memory; a molecule's row is read as float32
    assert np.allclose(values, raw) and values.min() == 0
    assert np.allclose(np.expm1(values[0]).sum(), 6)  # ethanol's 3 atoms, radius 0 to 2: 6
    assert values[4].sum() == 0  # unparsable: no environment


def test_full_descriptors_are_every_rdkit_descriptor_log_scaled_and_computed_by_name():
    train = [0, 1, 2, 3]
    features, raw = MoleculeFeatures.fit("rdkit2d-full+morgan", SMILES, train)
    names = all_descriptor_names()
    assert len(names) > 150 and "Ipc" in names and "MolLogP" in names
    assert features.descriptor_columns == list(names)
    assert len(features) == len(names) + MORGAN_BITS
    ipc = names.index("Ipc")
    plain = molecular_descriptors(SMILES, ["Ipc"])[:, 0]  # grows with size, past 1e30
    assert np.allclose(raw[[0, 1, 2, 3, 5], ipc], np.log1p(plain[[0, 1, 2, 3, 5]]), rtol=1e-5)
    values = features.compute(SMILES)
    assert np.isfinite(values).all() and np.abs(values[train, : len(names)]).max() < 10
    # a model saved under an RDKit with fewer descriptors: its own columns, by name
    older = MoleculeFeatures("rdkit2d-full", ["MolLogP", "Ipc"], [0.0, 0.0], [1.0, 1.0])
    expected = np.nan_to_num(raw[:, [names.index("MolLogP"), ipc]])  # mean 0, deviation 1
    assert np.allclose(older.compute(SMILES), expected, rtol=1e-5)


def test_cached_descriptors_are_computed_once_per_molecules_and_kind(monkeypatch, tmp_path):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, features_module, "_descriptors_of_smiles")
    first, raw = MoleculeFeatures.fit("rdkit2d+morgan", SMILES, [0, 1, 2], cache=True)
    again, raw_again = MoleculeFeatures.fit("rdkit2d", SMILES, [0, 1, 2], cache=True)
    assert [kind for _, kind, _ in calls] == ["rdkit2d+morgan"]  # the same descriptors: read back
    assert np.allclose(raw_again, raw[:, : len(DESCRIPTORS)], rtol=1e-6, equal_nan=True)
    assert np.allclose(again.mean, first.mean[: len(DESCRIPTORS)], rtol=1e-6)
    MoleculeFeatures.fit("rdkit2d", SMILES[:-1], [0, 1, 2], cache=True)  # other molecules
    MoleculeFeatures.fit("morgan", SMILES, [0, 1, 2], cache=True)  # no descriptors to keep
    assert [kind for _, kind, _ in calls] == ["rdkit2d+morgan", "rdkit2d"]
    files = sorted((tmp_path / "features").glob("*.npy"))
    assert len(files) == 2  # one a list of molecules (Morgan counts are kept as .npz)


def test_cached_morgan_counts_are_the_computed_ones_read_back(monkeypatch, tmp_path):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    computed = count_calls(monkeypatch, features_module, "fingerprints_of")
    plain = MoleculeFeatures.fit("morgan", SMILES, [0, 1, 2])[1]
    first = MoleculeFeatures.fit("morgan", SMILES, [0, 1, 2], cache=True)[1]
    again = MoleculeFeatures.fit("rdkit2d+morgan", SMILES, [0, 1, 2], cache=True)[1]
    assert len(computed) == 2  # without the cache, then once into it
    assert first.dtype == plain.dtype == np.float16 and np.array_equal(first, plain)
    assert np.array_equal(again[:, len(DESCRIPTORS) :], plain)
    [path] = (tmp_path / "features").glob("morgan-*.npz")
    assert path.stat().st_size < plain.nbytes / 10  # the non-zero counts only
    path.write_bytes(path.read_bytes()[:100])  # cut short
    assert np.array_equal(MoleculeFeatures.fit("morgan", SMILES, [0], cache=True)[1], plain)
    assert len(computed) == 3
    with np.load(path) as kept:
        assert kept["starts"].shape == (len(SMILES) + 1,)
    np.savez(path.with_suffix(""), starts=np.arange(7.0), bits=np.zeros(0), counts=np.zeros(0))
    assert np.array_equal(MoleculeFeatures.fit("morgan", SMILES, [0], cache=True)[1], plain)
    assert len(computed) == 4  # float indices are damage too


def npy_bytes(array):
    file = io.BytesIO()
    np.save(file, array)
    return file.getvalue()


def damaged_header(array):
    data = npy_bytes(array)
    shape = data.index(b"'shape': (") + len(b"'shape': (")
    return data[:shape] + b'"' + data[shape + 1 :]  # a header numpy cannot parse


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: b"",
        lambda raw: b"not an array",
        lambda raw: npy_bytes(raw[:-1]),
        lambda raw: npy_bytes(np.zeros(raw.shape, dtype=np.int64)),
        damaged_header,
        lambda raw: b"PK\x03\x04" + bytes(200),
    ],
    ids=["empty", "not an array", "wrong shape", "integers", "damaged header", "damaged zip"],
)
def test_a_damaged_cache_file_is_computed_again_and_replaced(monkeypatch, tmp_path, damage):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    _, raw = MoleculeFeatures.fit("rdkit2d", SMILES, [0, 1, 2], cache=True)
    [path] = (tmp_path / "features").glob("*.npy")
    path.write_bytes(damage(raw))
    _, again = MoleculeFeatures.fit("rdkit2d", SMILES, [0, 1, 2], cache=True)
    assert np.array_equal(again, raw, equal_nan=True)
    assert np.array_equal(np.load(path), raw, equal_nan=True)


def test_a_cache_that_cannot_be_written_costs_the_run_nothing(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))

    def full_disk(path, write):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(files, "atomic_write", full_disk)
    with caplog.at_level("WARNING", logger="partorch"):
        features, raw = MoleculeFeatures.fit("rdkit2d", SMILES, [0, 1, 2], cache=True)
    assert raw.shape == (len(SMILES), len(DESCRIPTORS)) and len(features) == len(DESCRIPTORS)
    assert "could not keep 6 molecules' descriptors in the cache" in caplog.text


def test_a_pool_of_processes_computes_the_same_features(monkeypatch, caplog):
    smiles = SMILES * 4
    monkeypatch.setattr(features_module, "DESCRIPTORS_POOL_MIN", 0)
    monkeypatch.setattr(chunked, "POOL_MIN_MOLECULES", 0)
    monkeypatch.setattr(chunked, "CHUNK", 5)  # 5 tasks, the last of 4 molecules
    monkeypatch.setattr(chunked, "pool_cores", lambda: 2)
    names = ["MolLogP", "Ipc", "TPSA"]
    assert chunked.pool_workers(len(smiles)) == 2
    with caplog.at_level("INFO", logger="partorch"):
        pooled = features_module.raw_features("rdkit2d-full+morgan", smiles, names)
    assert "rdkit2d-full descriptors: over a pool of 2 processes" in caplog.text
    assert "Morgan counts: over a pool of 2 processes" in caplog.text
    monkeypatch.setattr(chunked, "pool_cores", lambda: 1)  # the same, in this process
    alone = features_module.raw_features("rdkit2d-full+morgan", smiles, names)
    assert pooled.shape == (len(smiles), 3 + MORGAN_BITS) and pooled.dtype == np.float32
    assert np.array_equal(pooled, alone, equal_nan=True) and np.isnan(pooled[4, :3]).all()
    counted = (pooled[:, 3:] > 0).any(axis=1)  # every molecule RDKit parses, in its own row
    assert counted.tolist() == [s != "not a molecule" for s in smiles]


FIT_ONCE = """
import logging, sys
from partorch.molecules.features import MoleculeFeatures
logging.getLogger("partorch").addHandler(logging.StreamHandler(sys.stdout))
logging.getLogger("partorch").setLevel(logging.INFO)
MoleculeFeatures.fit("rdkit2d", sys.argv[1:], [0, 1], cache=True)
"""


def test_processes_of_one_node_compute_the_cached_descriptors_once(tmp_path):
    stdouts = python_at_once(FIT_ONCE, SMILES, {"PARTORCH_CACHE": str(tmp_path)})
    assert sum("computed 6 molecules' descriptors" in out for out in stdouts) == 1, stdouts
    assert sum("read 6 molecules' descriptors" in out for out in stdouts) == 2, stdouts


def test_features_survive_their_json_and_a_foreign_one_is_refused():
    features, _ = MoleculeFeatures.fit("rdkit2d", SMILES, [0, 1, 2, 3])
    again = features_from_dict(features.to_dict())
    assert again == features and np.array_equal(again.compute(SMILES), features.compute(SMILES))
    assert features_from_dict(None) is None
    with pytest.raises(PartorchError, match="extra_features.json holds"):
        features_from_dict({"kind": "morgan", "radius": 2, "bits": 2048})
    with pytest.raises(PartorchError, match="unknown extra features"):
        MoleculeFeatures.fit("maccs", SMILES, [0])


@pytest.mark.parametrize("augment", [False, True])
def test_batches_carry_each_molecule_s_own_row_of_features(augment):
    smiles = ["CCO", "CCCCCCO", "CN", "c1ccccc1"]
    tokenizer = SmilesTokenizer.build(smiles)
    rows = np.arange(4 * 3, dtype=np.float32).reshape(4, 3)
    dataset = smiles_dataset(smiles, [0, 1, 0, 1], tokenizer, [3, 1], augment, features=rows)
    assert dataset.feature_count == 3
    if augment:
        dataset.set_epoch(1)  # rewritten strings, the same molecules' features
    batch = dataset.collate([dataset[0], dataset[1]])
    tokens, lengths, features = batch.inputs
    assert torch.equal(features, torch.tensor(rows[[3, 1]]))
    assert tokens.shape[0] == 2 and batch.targets.flatten().tolist() == [1.0, 1.0]
    halves = smiles_dataset(smiles, [0, 1, 0, 1], tokenizer, features=rows.astype(np.float16))
    assert halves.features.dtype == torch.float16 and halves[2][1].dtype == torch.float32
    plain = smiles_dataset(smiles, [0, 1, 0, 1], tokenizer)
    assert plain.feature_count == 0 and len(plain.collate([plain[0]]).inputs) == 2


def test_the_head_reads_the_features_beside_the_encoding():
    torch.manual_seed(0)
    model = RNNPredictor(10, extra_features=3, embedding_dim=8, d_model=8, num_layers=1).eval()
    tokens, lengths = torch.tensor([[2, 3, 4], [5, 6, 0]]), torch.tensor([3, 2])
    features = torch.zeros(2, 3)
    before = model(tokens, lengths, features)
    assert before.shape == (2, 1)
    assert not torch.allclose(before, model(tokens, lengths, features + 1))
    with pytest.raises(PartorchError, match="reads 3 features; got none"):
        model(tokens, lengths)
    with pytest.raises(PartorchError, match="reads 3 features; got 2"):
        model(tokens, lengths, torch.zeros(2, 2))


def test_head_size_sets_the_heads_hidden_units_and_defaults_to_the_hidden_size():
    sizes = dict(embedding_dim=8, d_model=6, num_layers=1)
    default = RNNPredictor(10, extra_features=3, **sizes)
    assert default.head[0].weight.shape == (6, 2 * 6 + 3)
    wide = RNNPredictor(10, extra_features=3, head_size=40, num_outputs=2, **sizes)
    assert wide.head[0].weight.shape == (40, 2 * 6 + 3) and wide.head[-1].weight.shape == (2, 40)
    tokens, lengths = torch.tensor([[2, 3, 4]]), torch.tensor([3])
    assert wide.eval()(tokens, lengths, torch.zeros(1, 3)).shape == (1, 2)


def test_feature_dropout_zeroes_single_features_in_training_only():
    torch.manual_seed(0)
    sizes = dict(embedding_dim=8, d_model=8, num_layers=1, dropout=0.0)
    model = RNNPredictor(10, extra_features=400, feature_dropout=0.5, **sizes)
    read = []  # what the head reads: the encoding, then the features
    model.head.register_forward_pre_hook(lambda _, inputs: read.append(inputs[0][:, -400:]))
    tokens, lengths, features = (
        torch.tensor([[2, 3], [4, 5]]),
        torch.tensor([2, 2]),
        torch.ones(2, 400),
    )
    model.train()(tokens, lengths, features)
    dropped = read[-1] == 0
    assert 0.4 < dropped.float().mean() < 0.6
    assert not torch.equal(dropped[0], dropped[1])  # features, not whole molecules
    assert torch.equal(read[-1][~dropped], torch.full((int((~dropped).sum()),), 2.0))
    model.eval()(tokens, lengths, features)
    assert torch.equal(read[-1], features)
    plain = RNNPredictor(10, extra_features=400, **sizes)
    plain.head.register_forward_pre_hook(lambda _, inputs: read.append(inputs[0][:, -400:]))
    plain.train()(tokens, lengths, features)
    assert torch.equal(read[-1], features)
    with pytest.raises(PartorchError, match="--feature-dropout 0.5 drops computed features"):
        RNNPredictor(10, feature_dropout=0.5, **sizes)  # no --extra-features: nothing to drop


def test_descriptors_and_morgan_together_scale_the_descriptors_only():
    train = [0, 1, 2]
    both, raw = MoleculeFeatures.fit("rdkit2d+morgan", SMILES, train)
    descriptors, _ = MoleculeFeatures.fit("rdkit2d", SMILES, train)
    morgan, _ = MoleculeFeatures.fit("morgan", SMILES, train)
    assert both.columns == descriptors.columns + morgan.columns
    assert raw.shape == (len(SMILES), len(DESCRIPTORS) + MORGAN_BITS)
    values = both.compute(SMILES)
    assert values.dtype == np.float16 and np.isfinite(values).all()
    count = len(DESCRIPTORS)
    # the same figures as each kind on its own, to float16's precision
    assert np.allclose(values[:, :count], descriptors.compute(SMILES), atol=2e-3, rtol=2e-3)
    assert np.array_equal(values[:, count:], morgan.compute(SMILES))
    assert features_from_dict(both.to_dict()) == both
