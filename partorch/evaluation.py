"""Predictions, loss and ROC AUC over a loader; predictions for new SMILES."""
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from .data import get_dataloader
from .errors import PartorchError


class EvaluationError(PartorchError):
    pass


@dataclass
class Evaluation:
    loss: float
    roc_auc: float
    labels: np.ndarray
    probabilities: np.ndarray


def roc_auc(labels, probabilities, split="this split"):
    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        raise EvaluationError(f"{split} holds only molecules of class {int(labels[0])}: ROC AUC is undefined; "
                              "use more data or another seed")
    return float(roc_auc_score(labels, probabilities))


@torch.no_grad()
def predict(model, loader, device):
    """(labels, probabilities, logits) in loader order; model left in eval mode."""
    model.eval()
    labels, logits = [], []
    for tokens, lengths, batch_labels in loader:
        logits.append(model(tokens.to(device, non_blocking=True), lengths).float())
        labels.append(batch_labels)
    logits = torch.cat(logits).cpu() if logits else torch.zeros(0)
    labels = torch.cat(labels) if labels else torch.zeros(0)
    return labels.numpy(), torch.sigmoid(logits).numpy(), logits


def score(labels, logits, split="this split"):
    """Evaluation from labels and logits (numpy arrays or tensors), in any order."""
    labels, logits = torch.as_tensor(labels, dtype=torch.float32), torch.as_tensor(logits, dtype=torch.float32)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
    probabilities = torch.sigmoid(logits).numpy()
    return Evaluation(loss, roc_auc(labels.numpy(), probabilities, split), labels.numpy(), probabilities)


def evaluate(model, loader, device, split="this split"):
    labels, _, logits = predict(model, loader, device)
    return score(labels, logits, split)


def predict_smiles(model, tokenizer, smiles_list, device, batch_size=256):
    """Probabilities for SMILES strings, in input order.

    Returns (probabilities, failures): an empty string, or one with tokens
    outside the vocabulary (the model never learned them), gets NaN and an
    entry (position, message) in failures; the rest are still predicted.
    Batches are length-sorted, which is exact for this model.
    """
    encodable, failures = [], []
    for i, smiles in enumerate(smiles_list):
        unknown = tokenizer.unknown_tokens(smiles)
        if smiles and not unknown:
            encodable.append(i)
        else:
            failures.append((i, f"unknown tokens {unknown} in {smiles!r}" if smiles else "empty SMILES"))
    probabilities = np.full(len(smiles_list), np.nan)
    if encodable:
        loader = get_dataloader(smiles_list=[smiles_list[i] for i in encodable], labels=np.zeros(len(encodable)),
                                tokenizer=tokenizer, batch_size=batch_size)
        _, sorted_probabilities, _ = predict(model, loader, device)
        order = np.concatenate([np.asarray(b) for b in loader.batch_sampler])
        probabilities[np.asarray(encodable)[order]] = sorted_probabilities
    return probabilities, failures
