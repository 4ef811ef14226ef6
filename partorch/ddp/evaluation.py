"""Model outputs over a loader, optionally averaged over rewritten inputs
(test-time augmentation). No collectives here: which rank predicts what is
the training script's business."""

from functools import partial

import numpy as np
import torch

from .errors import PartorchError

# the rewritten inputs' streams for test-time augmentation, apart from training epochs
TTA_EPOCH_OFFSET = 10**6


@torch.no_grad()
def predict(model, loader, device, tta=0):
    """(targets, outputs) as float arrays [items, tasks] in loader order; the
    model is left in eval mode. With `tta`, the outputs are the mean over the
    given SMILES and `tta` random ones (the loader's order does not change:
    the sampler sorts by the given strings' lengths)."""
    if tta and not hasattr(loader.dataset, "set_epoch"):
        raise PartorchError(
            "--tta needs a dataset that can rewrite its molecules (set_epoch), "
            f"and {type(loader.dataset).__name__} cannot"
        )
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


def score(model, loaders, task, device, tta=0, gather=None):
    """The figures of each named split in `loaders` ({"dev": loader, ...}) for an
    epoch's row: `task.figures` of its metrics (loss, score, score per task).
    `gather`, when each rank predicts a share, runs this rank's prediction
    (a function of no arguments) and returns everyone's (targets, outputs)."""
    row = {}
    for name, loader in loaders.items():
        share = partial(predict, model, loader, device, tta)
        predictions = gather(share) if gather else share()
        row.update(task.figures(name, task.metrics(*predictions)))
    return row
