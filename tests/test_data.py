import numpy as np
import pytest
import torch

from partorch.data import (DataError, LengthBucketBatchSampler, collate_batch, get_dataloader,
                           get_ddp_dataloader, read_smiles_csv, split_indices)
from partorch.tokenizer import SmilesTokenizer


def test_reads_bbbp(bbbp_path):
    table = read_smiles_csv(bbbp_path)
    assert len(table.smiles) == 2050 and set(table.labels) == {0, 1}
    assert table.rows[0] == 2  # line numbers as a text editor shows them


def test_missing_column_lists_the_columns(write_csv):
    path = write_csv("smiles,label\nCCO,1\n")
    with pytest.raises(DataError, match=r"no column 'p_np'; the columns are \['smiles', 'label'\]"):
        read_smiles_csv(path)


def test_bad_labels_name_rows(write_csv):
    path = write_csv("smiles,p_np\nCCO,1\nCCC,yes\nCCN,0\nCCCl,2\n")
    with pytest.raises(DataError, match=r"row 3: 'yes'; row 5: '2'"):
        read_smiles_csv(path)


def test_missing_labels_dropped_with_warning_or_refused_when_strict(write_csv):
    path = write_csv("smiles,p_np\nCCO,1\nCCC,\nCCN,0\n")
    table = read_smiles_csv(path)
    assert table.smiles == ["CCO", "CCN"] and list(table.rows) == [2, 4]
    assert "1 rows have no 'p_np' label" in table.warnings[0]
    with pytest.raises(DataError, match="1 rows have no"):
        read_smiles_csv(path, strict=True)


def test_split_is_deterministic_disjoint_and_stratified(bbbp_path):
    labels = read_smiles_csv(bbbp_path).labels
    a, b = split_indices(labels, seed=7), split_indices(labels, seed=7)
    c = split_indices(labels, seed=8)
    assert all(np.array_equal(x, y) for x, y in [(a.train, b.train), (a.dev, b.dev), (a.test, b.test)])
    assert not np.array_equal(a.test, c.test)
    everything = np.concatenate([a.train, a.dev, a.test])
    assert len(everything) == len(labels) == len(np.unique(everything))
    assert len(a.test) == 205 and len(a.dev) == 369
    for part in (a.train, a.dev, a.test):
        assert abs(labels[part].mean() - labels.mean()) < 0.01


def test_one_class_cannot_be_split():
    with pytest.raises(DataError, match="all 50 molecules have label 1"):
        split_indices(np.ones(50, dtype=int), seed=0)


def test_collate_pads_with_zero():
    tokens, lengths, labels = collate_batch([(torch.tensor([5, 6, 7]), torch.tensor(1.0)),
                                             (torch.tensor([8]), torch.tensor(0.0))])
    assert tokens.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert lengths.tolist() == [3, 1] and labels.tolist() == [1.0, 0.0]


def _epoch_indices(sampler, epoch):
    sampler.set_epoch(epoch)
    return [i for batch in sampler for i in batch]


def test_bucket_sampler_ranks_cover_the_split_once_with_equal_step_counts():
    lengths = np.random.default_rng(0).integers(5, 60, size=1001)
    samplers = [LengthBucketBatchSampler(lengths, 64, world_size=2, rank=r, shuffle=True, seed=3) for r in range(2)]
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


def test_batch_not_divisible_by_world_size_is_refused():
    with pytest.raises(DataError, match="batch size 63 is not divisible by world size 2"):
        LengthBucketBatchSampler(np.ones(10), 63, world_size=2)


@pytest.mark.parametrize("sampler", ["bucket", "random"])
def test_loaders_split_the_global_batch(sampler):
    smiles = ["C" * (1 + i % 9) + "O" for i in range(100)]
    labels = np.arange(100) % 2
    tokenizer = SmilesTokenizer.build(smiles)
    single = get_dataloader(smiles_list=smiles, labels=labels, tokenizer=tokenizer, batch_size=20,
                            shuffle=True, sampler=sampler)
    shard = get_ddp_dataloader(rank=1, world_size=2, smiles_list=smiles, labels=labels, tokenizer=tokenizer,
                               batch_size=20, shuffle=True, sampler=sampler)
    assert max(len(b[2]) for b in single) == 20
    assert max(len(b[2]) for b in shard) == 10
    assert len(single) == len(shard) == 5


def test_fewer_training_molecules_than_processes_is_refused():
    with pytest.raises(DataError, match="3 training molecules are too few for 4 processes"):
        LengthBucketBatchSampler(np.ones(3), 8, world_size=4, shuffle=True)
