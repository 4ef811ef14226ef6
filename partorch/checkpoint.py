"""Atomic writes, training snapshots, and saving / loading a model directory.

A model directory holds `best_model.pt` (a state dict: tensors only, loadable
with `weights_only=True`), `tokenizer.json` and `hparams.json`. A training
snapshot (`checkpoints/last.pt`) holds everything needed to continue a run
after a crash or a torchrun restart, again as tensors and plain types only.
"""
import json
import os
from pathlib import Path
import random
import tempfile

import numpy as np
import torch

from .errors import PartorchError
from .rnn import RNNPredictor
from .tokenizer import load_tokenizer

MODEL_FILE, TOKENIZER_FILE, HPARAMS_FILE = "best_model.pt", "tokenizer.json", "hparams.json"


class CheckpointError(PartorchError):
    pass


def _atomic(path, write):
    """Write to a temporary file beside `path`, fsync, then rename over it,
    so a crash leaves either the old file or the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_torch_save(obj, path):
    _atomic(path, lambda f: torch.save(obj, f))


def atomic_write_text(text, path):
    _atomic(path, lambda f: f.write(text.encode()))


def atomic_write_json(obj, path):
    atomic_write_text(json.dumps(obj, indent=2) + "\n", path)


def ensure_writable_dir(path):
    """Create `path` and prove we can write there, before any training."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise CheckpointError(f"output folder {path} is not writable ({exc.strerror})") from None


def save_model_dir(directory, state_dict, tokenizer, hparams):
    directory = Path(directory)
    atomic_torch_save(state_dict, directory / MODEL_FILE)
    atomic_write_json(tokenizer.to_dict(), directory / TOKENIZER_FILE)
    atomic_write_json(hparams, directory / HPARAMS_FILE)


def load_state(path, device="cpu"):
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except Exception as exc:  # torch raises many kinds for a damaged file
        raise CheckpointError(f"{path}: corrupt or not a partorch checkpoint ({type(exc).__name__})") from None


def load_model_dir(directory, device="cpu"):
    """(model in eval mode, tokenizer, hparams) from a saved model directory."""
    directory = Path(directory)
    try:
        hparams = json.loads((directory / HPARAMS_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{directory / HPARAMS_FILE}: cannot read ({exc})") from None
    tokenizer = load_tokenizer(directory / TOKENIZER_FILE)
    model = RNNPredictor(tokenizer.vocab_size, **hparams["model"])
    model.load_state_dict(load_state(directory / MODEL_FILE, device))
    return model.to(device).eval(), tokenizer, hparams


def capture_rng():
    """This process's random states as tensors and plain types (weights_only-safe)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state):
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(_tuples(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].cpu())


def _tuples(obj):
    # torch.load gives back lists where random.setstate wants tuples
    return tuple(_tuples(x) for x in obj) if isinstance(obj, (list, tuple)) else obj
