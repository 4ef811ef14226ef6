"""Pretraining the SMILES encoder, and starting a classifier from it (--init-from).

Two objectives, alone or summed (OBJECTIVES):
- masked tokens: 15 % of each molecule's tokens are chosen, and the encoder's output at each
  chosen place must name the token that was there; of those, 80 % are replaced by <mask>, 10 %
  by a random token and 10 % left as they are (BERT's recipe). It suits the classifier's
  encoder as it is: a bidirectional, stacked LSTM reads both sides of a token at every layer,
  so a next-token objective would let a second layer see the answer, while a masked token is
  hidden from every layer. Which tokens are masked comes from (seed, epoch, step, rank), so a
  run resumed mid-epoch masks exactly what an uninterrupted one would.
- descriptors: the pooled encoding, the very vector a classifier's head reads, regresses
  onto RDKit 2D descriptors of the molecule, standardised (CheMeleon's recipe, which
  chemprop fine-tunes from); the corpus is prepared with --descriptors.
"""

from dataclasses import dataclass, field
import hashlib
import json
import math
from pathlib import Path

import torch
from torch import nn
import torch.nn.functional as F

from ..ddp.checkpoint import CheckpointError, load_state
from ..ddp.logs import log
from ..ddp.optimization import mark_pretrained
from .rnn import RNNEncoder, RNNPredictor
from .tokenizer import SmilesTokenizer, tokenizer_from_dict

MASK = "<mask>"
IGNORED = -100  # cross_entropy's ignore_index: the places that were not masked
ENCODER_KEYS = ("embedding.", "lstm.")
ENCODER_HPARAMS = ("embedding_dim", "d_model", "num_layers", "bidirectional")
OBJECTIVES = {"masked": (True, False), "descriptors": (False, True), "both": (True, True)}


def objective_parts(objective):
    """(whether it predicts masked tokens, whether it regresses onto descriptors)."""
    return OBJECTIVES[objective]


class PretrainingModel(RNNEncoder):
    """The encoder with a head for each objective: a linear layer from its output at every
    token to the vocabulary (masked tokens), and one from its pooled encoding to the
    `descriptors` descriptors."""

    def __init__(self, vocab_size, *, masked=True, descriptors=0, **encoder):
        super().__init__(vocab_size, **encoder)
        self.lm_head = nn.Linear(self.output_size, vocab_size) if masked else None
        self.descriptor_head = nn.Linear(self.output_size, descriptors) if descriptors else None

    def forward(self, tokens, lengths):
        """(logits [batch, time, vocabulary] or None, descriptors [batch, k] or None)."""
        outputs = self.sequence_outputs(tokens, lengths)
        logits = None if self.lm_head is None else self.lm_head(self.dropout(outputs))
        if self.descriptor_head is None:
            return logits, None
        pooled = pooled_encoding(outputs, lengths, self.bidirectional)
        return logits, self.descriptor_head(self.dropout(pooled))


def pooled_encoding(outputs, lengths, bidirectional):
    """The last layer's outputs [batch, time, features] pooled as RNNEncoder.encode pools:
    the forward direction at each molecule's last token, the backward one at its first."""
    last = (lengths.to(outputs.device) - 1).clamp(min=0)
    forward = outputs[torch.arange(len(outputs), device=outputs.device), last]
    if not bidirectional:
        return forward
    half = outputs.shape[-1] // 2
    return torch.cat([forward[:, :half], outputs[:, 0, half:]], dim=-1)


def pretraining_tokenizer(corpus_tokenizer):
    """The corpus's vocabulary and <mask> last (no SMILES holds it: the regex splits "<")."""
    return SmilesTokenizer(corpus_tokenizer.tokens + [MASK])


def batch_generator(*keys):
    """A torch.Generator seeded from `keys` (seed, epoch, step, rank): the same stream for the
    same step of the same run, whatever happened before it."""
    text = ",".join(map(str, keys)).encode()
    return torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(text).digest()[:7], "big"))


def mask_tokens(tokens, lengths, mask_id, fraction, generator):
    """(inputs, targets): `tokens` with a `fraction` of each molecule's tokens chosen, and
    of those 80 % set to `mask_id`, 10 % to a random token and 10 % left; `targets` holds the
    chosen tokens and IGNORED elsewhere (padding included)."""
    shape = tokens.shape
    real = torch.arange(shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    chosen = (torch.rand(shape, generator=generator) < fraction) & real
    how = torch.rand(shape, generator=generator)
    # ids 2..mask_id-1: the vocabulary's tokens, neither padding, <unk> nor <mask>
    random_ids = torch.randint(2, mask_id, shape, generator=generator)
    inputs = torch.where(chosen & (how < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (how >= 0.8) & (how < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, tokens, IGNORED)


def masked_loss(logits, targets):
    """(summed cross-entropy over the masked places, their count, how many were named right)."""
    flat, wanted = logits.flatten(0, 1).float(), targets.flatten()
    loss = F.cross_entropy(flat, wanted, ignore_index=IGNORED, reduction="sum")
    counted = wanted != IGNORED
    correct = (flat.argmax(-1) == wanted)[counted].sum()
    return loss, counted.sum(), correct


def descriptor_loss(predicted, targets):
    """(the squared error of each molecule's descriptors, averaged over those not NaN and
    summed over the molecules; how many molecules had one)."""
    known = ~torch.isnan(targets)
    errors = torch.where(known, predicted.float() - targets.nan_to_num(), 0.0) ** 2
    return (errors.sum(1) / known.sum(1).clamp(min=1)).sum(), known.any(1).sum()


def objective_losses(model, batch, mask_id, fraction, generator, device):
    """The pretraining losses of one batch, summed over it, left on the device: a dict with
    masked (loss, count, correct) and/or descriptors (loss, count), as `model` has heads.
    `mask_id`: None where the objective masks no token; else which to mask are drawn from
    `generator`."""
    tokens, lengths = batch.inputs
    inputs, targets = tokens, None
    if mask_id is not None:
        inputs, targets = mask_tokens(tokens, lengths, mask_id, fraction, generator)
    logits, predicted = model(inputs.to(device), lengths.to(device))
    losses = {}
    if logits is not None:
        losses["masked"] = masked_loss(logits, targets.to(device))
    if predicted is not None:
        losses["descriptors"] = descriptor_loss(predicted, batch.targets.to(device))
    return losses


@torch.no_grad()
def evaluate(model, loader, mask_id, fraction, seed, device):
    """On `loader`, masked alike at every evaluation (the stream comes from the seed and the
    batch's place): the masked-token loss, perplexity (exp of the loss) and accuracy, and/or
    the descriptors' mean squared error (standardised), as `model` has heads."""
    was_training = model.training
    model.eval()
    totals = {}
    for i, batch in enumerate(loader):
        losses = objective_losses(model, batch, mask_id, fraction, batch_generator(seed, i), device)
        for name, values in losses.items():
            summed = torch.stack([x.double().cpu() for x in values])
            totals[name] = totals.get(name, 0) + summed
    model.train(was_training)
    row = {}
    if "masked" in totals:
        loss, count, correct = totals["masked"].tolist()
        row.update(loss=loss / count, perplexity=math.exp(loss / count), accuracy=correct / count)
    if "descriptors" in totals:
        loss, count = totals["descriptors"].tolist()
        row.update(descriptor_mse=loss / count)
    return row


@dataclass
class PretrainingState:
    """Where a pretraining run stands; a snapshot can be taken after any step."""

    epoch: int = 1  # the epoch in progress
    step: int = 0  # its steps taken
    global_step: int = 0
    tokens: int = 0  # tokens trained on, over all ranks
    seconds: float = 0.0
    history: list = field(default_factory=list)  # one row per held-out evaluation
    # each rank's running digest of the token ids it trained on: equal for two runs that
    # trained on the same samples in the same order
    sample_digests: list = field(default_factory=list)
    job: str = None

    def position(self):
        return f"step {self.step} of epoch {self.epoch} (step {self.global_step} of the run)"


def running_digest(previous, tokens):
    return hashlib.sha256(previous.encode() + tokens.cpu().numpy().tobytes()).hexdigest()


# ------------------------------------------------------------ fine-tuning: --init-from
def pretrained_tokens(folder):
    """The vocabulary of a pretrained encoder's folder, in id order: a fine-tuning run's
    vocabulary starts with it."""
    return pretrained_encoder(folder)[0]


def pretrained_encoder(folder):
    """(its tokens in id order, its encoder hparams, its weights) from a pretraining run's
    folder or a shipped model's: best_model.pt, hparams.json, tokenizer.json."""
    folder = Path(folder)
    try:
        hparams = json.loads((folder / "hparams.json").read_text())["model"]
        spec = json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError, KeyError):
        raise CheckpointError(
            f"--init-from {folder}: not a pretrained encoder's folder (hparams.json, "
            "tokenizer.json and best_model.pt from scripts/pretrain_ddp.py)"
        ) from None
    if spec.get("type") != "smiles":
        raise CheckpointError(f"--init-from {folder}: its tokenizer is not a SMILES vocabulary")
    weights = load_state(folder / "best_model.pt")
    if not any(k.startswith(ENCODER_KEYS) for k in weights):
        raise CheckpointError(f"--init-from {folder}: best_model.pt holds no encoder weights")
    return tuple(tokenizer_from_dict(spec).tokens), hparams, weights


def rnn_predictor(hparams, tokenizer, init_from=None, device="cpu"):
    """(an RNNPredictor on `device`, its hparams): fresh, or with `init_from` (--init-from)
    started from a pretrained encoder, whose sizes it takes (see `fine_tuned_predictor`)."""
    if init_from:
        model, hparams = fine_tuned_predictor(init_from, hparams, tokenizer)
    else:
        model = RNNPredictor(**hparams)
    return model.to(device), hparams


def fine_tuned_predictor(folder, hparams, tokenizer):
    """(an RNNPredictor whose embedding and LSTM are the pretrained encoder's at `folder`,
    its hparams): the encoder's sizes replace those in `hparams` (the run's flags), logged
    where they differ. `tokenizer` is the run's, whose vocabulary must extend the
    encoder's (molecule_data(init_from=...) builds it so)."""
    tokens, encoder, weights = pretrained_encoder(folder)
    changed = {k: encoder[k] for k in ENCODER_HPARAMS if hparams.get(k) != encoder[k]}
    if changed:
        sizes = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in changed.items())
        log.info("--init-from %s: the encoder's sizes replace the flags': %s", folder, sizes)
    hparams = {**hparams, **{k: encoder[k] for k in ENCODER_HPARAMS}}
    model = RNNPredictor(**hparams)
    load_encoder(model, getattr(tokenizer, "tokens", ()), weights, tokens, folder)
    mark_pretrained(p for name, p in model.named_parameters() if name.startswith(ENCODER_KEYS))
    return model, hparams


def load_encoder(model, tokens, weights, pretrained_tokens, source):
    """Copy a pretrained embedding and LSTM into `model`, whose vocabulary `tokens` must
    start with the pretrained one's `pretrained_tokens`, in the same order (tokens it added
    keep their fresh embeddings); anything else is a clear error."""
    if tuple(tokens[: len(pretrained_tokens)]) != tuple(pretrained_tokens):
        mismatch = next(
            (i for i, (a, b) in enumerate(zip(tokens, pretrained_tokens)) if a != b),
            min(len(tokens), len(pretrained_tokens)),
        )
        raise CheckpointError(
            f"--init-from {source}: the vocabulary does not match the encoder's (token "
            f"{mismatch}: this run has {_token_at(tokens, mismatch)}, the encoder "
            f"{_token_at(pretrained_tokens, mismatch)}); prepare the data with the encoder's "
            "vocabulary (--vocabulary-from) or use the SMILES tokenizer"
        )
    own = model.state_dict()
    for key, value in weights.items():
        if not key.startswith(ENCODER_KEYS):
            continue
        if key == "embedding.weight":
            own[key][: len(pretrained_tokens)] = value[: len(pretrained_tokens)]
        elif own.get(key) is None or own[key].shape != value.shape:
            raise CheckpointError(f"--init-from {source}: {key} does not fit this model")
        else:
            own[key].copy_(value)
    model.load_state_dict(own)


def _token_at(tokens, i):
    return repr(tokens[i]) if i < len(tokens) else "none"
