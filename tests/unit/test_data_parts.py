"""CSV reading, splits, the typed batch, samplers and loaders."""

import hashlib

import numpy as np
import pytest
import torch

from partorch.ddp.data import Batch, FeatureDataset
from partorch.ddp.loaders import get_dataloader, get_ddp_dataloader
from partorch.ddp.sampler import LengthBucketBatchSampler
from partorch.molecules.datasets import collate_token_ids, smiles_dataset
from partorch.molecules.splits import split_indices
from partorch.molecules.table import DataError, read_molecule_csv, resolve_columns
from partorch.molecules.tokenizer import SmilesTokenizer


def test_the_shipped_bbbp_is_the_moleculenet_file(bbbp_path):
    digest = hashlib.sha256(bbbp_path.read_bytes()).hexdigest()
    assert digest == "d07a38487aeac5cee5508413e468043ef3097451d2a112701c2d60be9ec6b662"


def test_reads_bbbp(bbbp_path):
    table = read_molecule_csv(bbbp_path)
    assert len(table.smiles) == 2050 and table.labels.shape == (2050, 1)
    assert set(np.unique(table.labels)) == {0.0, 1.0} and table.label_columns == ["p_np"]
    assert table.rows[0] == 2  # line numbers as a text editor shows them


def test_missing_column_lists_the_columns(write_csv):
    path = write_csv("smiles,label\nCCO,1\n")
    with pytest.raises(DataError, match=r"no column 'p_np'; the columns are \['smiles', 'label'\]"):
        read_molecule_csv(path)


def test_label_columns_with_commas_in_their_names_are_found():
    columns = ["smiles", "a", "Injury,_poisoning", "b,c", "d"]
    assert resolve_columns(["a,Injury,_poisoning,b,c", "d"], columns, "f.csv") == [
        "a",
        "Injury,_poisoning",
        "b,c",
        "d",
    ]
    with pytest.raises(DataError, match="no column 'x'"):
        resolve_columns(["a,x"], columns, "f.csv")
    with pytest.raises(DataError, match="named twice"):
        resolve_columns(["a", "a"], columns, "f.csv")


def test_non_numbers_name_their_rows(write_csv):
    path = write_csv("smiles,p_np\nCCO,1\nCCC,yes\nCCN,0\nCCCl,maybe\n")
    with pytest.raises(
        DataError, match=r"must hold numbers; 2 cells do not, first: row 3: 'yes'; row 5: 'maybe'"
    ):
        read_molecule_csv(path)


def test_unlabelled_rows_dropped_with_warning_or_refused_when_strict(write_csv):
    path = write_csv("smiles,p_np\nCCO,1\nCCC,\nCCN,0\n")
    table = read_molecule_csv(path)
    assert table.smiles == ["CCO", "CCN"] and list(table.rows) == [2, 4]
    assert "1 rows have no 'p_np' label" in table.warnings[0]
    with pytest.raises(DataError, match="1 rows have no"):
        read_molecule_csv(path, strict=True)


def test_several_columns_keep_single_gaps_as_missing_labels(write_csv):
    path = write_csv("smiles,a,b\nCCO,1,\nCCC,,\nCCN,0,1\n")
    table = read_molecule_csv(path, label_columns=["a,b"])
    assert table.smiles == ["CCO", "CCN"]  # the row with no label at all is dropped
    assert np.isnan(table.labels[0, 1]) and table.labels[1].tolist() == [0.0, 1.0]


def test_split_is_deterministic_disjoint_and_stratified(bbbp_path):
    classes = read_molecule_csv(bbbp_path).labels[:, 0].astype(int)
    a, b = (
        split_indices(len(classes), 7, classes=classes),
        split_indices(len(classes), 7, classes=classes),
    )
    c = split_indices(len(classes), 8, classes=classes)
    assert a.as_lists() == b.as_lists() and a.test.tolist() != c.test.tolist()
    everything = np.concatenate([a.train, a.dev, a.test])
    assert len(everything) == len(classes) == len(np.unique(everything))
    assert len(a.test) == 205 and len(a.dev) == 369
    for part in (a.train, a.dev, a.test):
        assert abs(classes[part].mean() - classes.mean()) < 0.01


def test_one_class_cannot_be_split():
    with pytest.raises(DataError, match="all 50 molecules have label 1"):
        split_indices(50, 0, classes=np.ones(50, dtype=int))


def test_without_classes_the_stratified_split_is_the_random_one():
    a, b = split_indices(100, 3), split_indices(100, 3, "random")
    assert a.as_lists() == b.as_lists() and (len(a.train), len(a.dev), len(a.test)) == (72, 18, 10)


def test_collate_pads_with_zero_into_a_typed_batch():
    batch = collate_token_ids(
        [(torch.tensor([5, 6, 7]), torch.tensor([1.0])), (torch.tensor([8]), torch.tensor([0.0]))]
    )
    tokens, lengths = batch.inputs
    assert tokens.tolist() == [[5, 6, 7], [8, 0, 0]] and lengths.tolist() == [3, 1]
    assert batch.targets.tolist() == [[1.0], [0.0]] and len(batch) == 2


def test_batch_splits_into_micro_batches_in_order():
    batch = Batch((torch.arange(10).view(5, 2),), torch.arange(5.0).view(5, 1))
    pieces = batch.split(2)
    assert [len(p) for p in pieces] == [3, 2]
    assert torch.equal(torch.cat([p.inputs[0] for p in pieces]), batch.inputs[0])
    assert [len(p) for p in Batch((torch.zeros(1, 2),), torch.zeros(1, 1)).split(4)] == [
        1
    ]  # no empty pieces


def _epoch_indices(sampler, epoch):
    sampler.set_epoch(epoch)
    return [i for batch in sampler for i in batch]


def test_bucket_sampler_ranks_cover_the_split_once_with_equal_step_counts():
    lengths = np.random.default_rng(0).integers(5, 60, size=1001)
    samplers = [
        LengthBucketBatchSampler(lengths, 64, world_size=2, rank=r, shuffle=True, seed=3)
        for r in range(2)
    ]
    seen = [_epoch_indices(s, 1) for s in samplers]
    assert sorted(seen[0] + seen[1]) == list(range(1001))
    assert len(samplers[0]) == len(samplers[1])
    assert _epoch_indices(samplers[0], 2) != seen[0]  # a fresh order every epoch
    twin = LengthBucketBatchSampler(lengths, 64, world_size=2, rank=0, shuffle=True, seed=3)
    assert _epoch_indices(twin, 1) == seen[0]  # and the same order for the same seed


def test_bucket_sampler_groups_similar_lengths():
    lengths = np.random.default_rng(0).integers(5, 100, size=2048)
    sampler = LengthBucketBatchSampler(lengths, 64, shuffle=True, seed=0)
    padded = sum(len(b) * lengths[b].max() for b in sampler)
    assert padded < 1.1 * lengths.sum()


def test_bucket_sampler_fills_whole_batches_with_one_length_where_it_can():
    """Batches without padding run as one fused LSTM call: a length held by
    130 items gives two full batches of 64 of it alone, every epoch."""
    lengths = np.concatenate(
        [np.full(130, 10), np.random.default_rng(1).integers(11, 40, size=300)]
    )
    sampler = LengthBucketBatchSampler(lengths, 64, world_size=2, rank=1, shuffle=True, seed=0)
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        batches = [lengths[b] for b in sampler]
        uniform = [b for b in batches if len(set(b)) == 1 and b[0] == 10]
        assert len(uniform) == 2 and all(len(b) == 32 for b in uniform)
        assert (
            sum(int((b == 10).sum()) for b in batches) == 65
        )  # this rank: 32 + 32, and 1 of the 2 left over


def test_batch_not_divisible_by_world_size_is_refused():
    with pytest.raises(DataError, match="batch size 63 is not divisible by world size 2"):
        LengthBucketBatchSampler(np.ones(10), 63, world_size=2)


def test_fewer_training_molecules_than_processes_is_refused():
    with pytest.raises(DataError, match="3 training molecules are too few for 4 processes"):
        LengthBucketBatchSampler(np.ones(3), 8, world_size=4, shuffle=True)


@pytest.mark.parametrize("sampler", ["bucket", "random"])
def test_loaders_split_the_global_batch_and_set_epoch_through_their_sampler(sampler):
    smiles = ["C" * (1 + i % 9) + "O" for i in range(100)]
    labels = np.arange(100) % 2
    dataset = smiles_dataset(smiles, labels, SmilesTokenizer.build(smiles), np.arange(100))
    keywords = dict(batch_size=20, shuffle=True, num_workers=0, sampler=sampler)
    single = get_dataloader(dataset, **keywords)
    shard = get_ddp_dataloader(dataset, rank=1, world_size=2, **keywords)
    assert max(len(b) for b in single) == 20 and max(len(b) for b in shard) == 10
    assert len(single) == len(shard) == 5
    first = [b.targets.tolist() for b in shard]
    shard.sampler.set_epoch(1)  # the DistributedSampler idiom reaches partorch's batch sampler
    assert [b.targets.tolist() for b in shard] != first


def test_a_ready_dataset_without_lengths_is_batched_and_sharded():
    features, labels = torch.randn(30, 7), torch.randn(30)
    dataset = FeatureDataset(features, labels)
    shards = [
        get_ddp_dataloader(dataset, rank=r, world_size=3, batch_size=6, shuffle=True, seed=1)
        for r in range(3)
    ]
    batches = [list(loader) for loader in shards]
    assert len({len(b) for b in batches}) == 1  # the same number of steps on every rank
    seen = torch.cat([b.inputs[0] for rank in batches for b in rank])
    assert sorted(seen[:, 0].tolist()) == sorted(features[:, 0].tolist())  # each item once
    assert batches[0][0].targets.shape == (2, 1)


def test_a_pass_over_a_loader_leaves_torchs_random_stream_alone():
    """Scoring dev or test must not shift the training's dropout masks."""
    dataset = FeatureDataset(torch.randn(10, 3), torch.ones(10, 1))
    loader = get_dataloader(dataset, batch_size=4)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    assert sum(len(batch) for batch in loader) == 10
    assert torch.equal(torch.get_rng_state(), before)
