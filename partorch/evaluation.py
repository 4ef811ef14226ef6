"""Model outputs over a loader (optionally averaged over random SMILES), and
outputs for new SMILES. No collectives here: which rank predicts what is the
training script's business."""
import numpy as np
import torch

from .chem import canonical_smiles
from .errors import PartorchError
from .loaders import get_dataloader

TTA_EPOCH_OFFSET = 10 ** 6  # random-SMILES streams for test-time augmentation, apart from training epochs


@torch.no_grad()
def predict(model, loader, device, tta=0):
    """(targets, outputs) as float arrays [items, tasks] in loader order; the
    model is left in eval mode. With `tta`, the outputs are the mean over the
    given SMILES and `tta` random ones (the loader's order does not change:
    the sampler sorts by the given strings' lengths)."""
    if tta and not hasattr(loader.dataset, "set_epoch"):
        raise PartorchError("--tta needs a dataset that can rewrite its molecules (set_epoch), "
                            f"and {type(loader.dataset).__name__} cannot")
    model.eval()
    targets, outputs = _outputs(model, loader, device)
    for variant in range(1, tta + 1):
        loader.dataset.set_epoch(TTA_EPOCH_OFFSET + variant)
        outputs = outputs + _outputs(model, loader, device)[1]
    if tta:
        loader.dataset.set_epoch(None)
    return targets, outputs / (tta + 1)


def _outputs(model, loader, device):
    targets, outputs = [], []
    for batch in loader:
        outputs.append(model(*batch.to(device).inputs).float().cpu())
        targets.append(batch.targets)
    if not outputs:
        return np.zeros((0, 0)), np.zeros((0, 0))
    return torch.cat(targets).double().numpy(), torch.cat(outputs).double().numpy()


def predict_smiles(model, tokenizer, smiles_list, device, batch_size=256, smiles_form="raw"):
    """Model outputs [molecules, tasks] for SMILES strings, in input order,
    each written in `smiles_form`, the form the model was trained on.

    Returns (outputs, failures): an empty string, one RDKit cannot parse (for
    the canonical form), or one with tokens outside the vocabulary (the model
    never learned them), gets a row of NaN and an entry (position, message)
    in failures; the rest are still predicted.
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
            failures.append((i, f"unknown tokens {unknown} in {smiles!r}" if smiles else "empty SMILES"))
    if not encodable:
        return np.full((len(smiles_list), getattr(model, "num_outputs", 1)), np.nan), failures
    loader = get_dataloader(smiles_list=[written[i] for i in encodable], labels=np.zeros(len(encodable)),
                            tokenizer=tokenizer, batch_size=batch_size)
    _, sorted_outputs = predict(model, loader, device)
    outputs = np.full((len(smiles_list), sorted_outputs.shape[1]), np.nan)
    order = np.concatenate([np.asarray(b) for b in loader.batch_sampler])
    outputs[np.asarray(encodable)[order]] = sorted_outputs
    return outputs, failures
