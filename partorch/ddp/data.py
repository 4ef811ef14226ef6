"""The typed batch the training loop sees, and what a script's data builder returns.

A batch is `Batch(inputs, targets)`: the loop calls `model(*batch.inputs)`
and hands the output and `batch.targets` to the task, so it never needs to
know what the inputs are (token ids and lengths for SMILES, fingerprints in
examples/). A dataset may carry `lengths` (one per item) for the bucket
sampler, and a `collate` function that builds a Batch from its items.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset


@dataclass
class TrainingData:
    """What a script's `build_data` returns."""

    train: Dataset
    dev: Dataset
    test: Dataset
    task: object  # the loss and the metrics (e.g. partorch.molecules.tasks.BinaryClassification)
    descriptions: dict  # JSON-able, saved beside the model (e.g. {"tokenizer": ...})
    digests: dict  # name -> digest of what must be the same on every rank (split, vocabulary)
    warnings: list  # about the data, to be said once
    tta: int = (
        0  # score dev and test as the mean over the given inputs and this many rewritten ones
    )


@dataclass
class Batch:
    inputs: tuple  # what model(*inputs) takes
    targets: torch.Tensor  # float [batch, tasks]; NaN = missing label

    def __len__(self):
        return len(self.targets)

    def to(self, device):
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return Batch(tuple(move(x) for x in self.inputs), move(self.targets))

    def pin_memory(self):  # DataLoader(pin_memory=True) calls this on custom batches
        return Batch(tuple(x.pin_memory() for x in self.inputs), self.targets.pin_memory())

    def split(self, pieces):
        """At most `pieces` non-empty micro-batches, in order (for accumulation)."""
        parts = zip(*(torch.tensor_split(x, pieces) for x in (*self.inputs, self.targets)))
        return [Batch(tuple(p[:-1]), p[-1]) for p in parts if len(p[-1])]


def as_targets(labels):
    """Labels as a float tensor [molecules, tasks] (a 1-D array is one task)."""
    labels = torch.as_tensor(np.asarray(labels, dtype=np.float32))
    return labels.unsqueeze(1) if labels.dim() == 1 else labels


def collate_tensors(items):
    """Items (x1, ..., xk, target) of equal-shaped tensors -> Batch((x1..xk stacked), targets)."""
    fields = [torch.stack(column) for column in zip(*items)]
    return Batch(tuple(fields[:-1]), fields[-1].reshape(len(items), -1))


class FeatureDataset(Dataset):
    """Fixed-length feature vectors (fingerprints, descriptors) and their targets."""

    collate = staticmethod(collate_tensors)

    def __init__(self, features, labels):
        self.features = torch.as_tensor(np.asarray(features, dtype=np.float32))
        self.targets = as_targets(labels)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.features[i], self.targets[i]
