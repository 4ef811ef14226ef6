"""Model outputs for new SMILES, written as the model was trained on them."""

import numpy as np
from tqdm import tqdm

from ..ddp.evaluation import predict
from ..ddp.loaders import get_dataloader
from .chem import canonical_smiles
from .datasets import smiles_dataset


def predict_smiles(
    model,
    tokenizer,
    smiles_list,
    device,
    batch_size=256,
    smiles_form="raw",
    progress=False,
    features=None,
):
    """Model outputs [molecules, tasks] for SMILES strings, in input order,
    each written in `smiles_form`, the form the model was trained on. The
    outputs are the model's raw ones (logits, standardised values):
    `task.predictions(outputs)` turns them into probabilities or units.

    Returns (outputs, failures): an empty string, one RDKit cannot parse (for
    the canonical form), or one with tokens outside the vocabulary (the model
    never learned them), gets a row of NaN and an entry (position, message)
    in failures; the rest are still predicted.

    progress: a bar of the molecules predicted on stderr, shown only on a
    terminal (a string labels it). features: the MoleculeFeatures the model was
    trained with (--extra-features), computed here for each molecule.
    """
    written = canonical_smiles(smiles_list) if smiles_form == "canonical" else list(smiles_list)
    encodable, failures = [], []
    for i, (given, smiles) in enumerate(zip(smiles_list, written)):
        unknown = tokenizer.unknown_tokens(smiles) if smiles else []
        if smiles is None:
            failures.append((i, f"RDKit cannot parse {given!r}"))
        elif smiles and not unknown:
            encodable.append(i)
        else:
            failures.append(
                (i, f"unknown tokens {unknown} in {smiles!r}" if smiles else "empty SMILES")
            )
    if not encodable:
        return np.full((len(smiles_list), getattr(model, "num_outputs", 1)), np.nan), failures
    kept = [written[i] for i in encodable]
    rows = None if features is None else features.compute(kept)
    dataset = smiles_dataset(kept, np.zeros(len(encodable)), tokenizer, features=rows)
    loader = get_dataloader(dataset, batch_size=batch_size)
    with tqdm(
        total=len(encodable),
        unit="mol",
        desc=progress if isinstance(progress, str) else None,
        disable=None if progress else True,
    ) as bar:
        _, sorted_outputs = predict(model, _Counted(loader, bar), device)
    outputs = np.full((len(smiles_list), sorted_outputs.shape[1]), np.nan)
    order = np.concatenate([np.asarray(b) for b in loader.batch_sampler])
    outputs[np.asarray(encodable)[order]] = sorted_outputs
    return outputs, failures


class _Counted:
    """A loader whose batches advance a progress bar: `predict` takes loaders only."""

    def __init__(self, loader, bar):
        self.loader, self.dataset, self.bar = loader, loader.dataset, bar

    def __iter__(self):
        for batch in self.loader:
            yield batch
            self.bar.update(len(batch.targets))
