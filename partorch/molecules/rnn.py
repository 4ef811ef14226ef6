"""The model: token embedding, LSTM layers, a small MLP head, one output per task.

No optimizer, no loss and no distributed logic live here.
"""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..ddp.errors import PartorchError


def reverse_each(x, lengths):
    """Reverse the first `lengths[b]` steps of every sequence, leaving padding last.

    Running the backward direction on this view means it starts at each
    molecule's real last token instead of at the padding, so a molecule's
    output does not depend on what it was batched with.
    """
    steps = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    last = (lengths.to(x.device) - 1).unsqueeze(1)
    index = torch.where(steps <= last, last - steps, steps)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


def lstm_runs_in_bfloat16(device):
    """Whether `device` has bfloat16 LSTM kernels (--amp bf16): oneDNN's need
    AVX-512 on x86 CPUs, and on AVX2-only CPUs the call fails."""
    # the seeded stream stays put
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        lstm = nn.LSTM(2, 2).to(device)
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                lstm(torch.zeros(1, 1, 2, device=device))
            return True
        except RuntimeError:
            return False


def _rename_per_layer_weights(state_dict, prefix, *_):
    """Models saved before the fused LSTM held one single-layer LSTM per layer
    and direction (forward_layers.1.weight_ih_l0): their weights, renamed, are
    this model's (lstm.weight_ih_l1), so their folders still load."""
    for key in [
        k
        for k in state_dict
        if k.startswith((f"{prefix}forward_layers.", f"{prefix}backward_layers."))
    ]:
        group, layer, name = key[len(prefix) :].split(".")
        suffix = "_reverse" if group == "backward_layers" else ""
        state_dict[f"{prefix}lstm.{name.removesuffix('_l0')}_l{layer}{suffix}"] = state_dict.pop(
            key
        )


class RNNEncoder(nn.Module):
    """Token embedding and LSTM layers: what a classifier and a pretrained language model
    share (their weights are named alike, so one's load into the other's: --init-from)."""

    def __init__(
        self, vocab_size, *, embedding_dim=128, d_model=128, num_layers=3, bidirectional=True,
        dropout=0.2,
    ):  # fmt: skip
        super().__init__()
        self.bidirectional = bidirectional
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        # All layers and directions in one nn.LSTM: a batch of one length runs it as a single
        # fused call (oneDNN, cuDNN); batches of mixed lengths run its weights layer by layer.
        self.lstm = nn.LSTM(
            embedding_dim,
            d_model,
            num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(dropout)
        self._register_load_state_dict_pre_hook(_rename_per_layer_weights)

    @property
    def output_size(self):
        return self.lstm.hidden_size * (2 if self.bidirectional else 1)

    @staticmethod
    def check_amp(amp, device):
        """Stop before training when `--amp bf16` meets a device without bfloat16 LSTM kernels."""
        if amp == "bf16" and not lstm_runs_in_bfloat16(device):
            kind = device.type.upper()
            raise PartorchError(
                f"--amp bf16: this {kind} has no bfloat16 LSTM kernels; use --amp off"
            )

    def encode(self, tokens, lengths):
        """Last-layer summary: forward state at the last token, plus the
        backward state after reading the whole molecule back to its first."""
        x = self.embedding(tokens)
        if bool((lengths == tokens.shape[1]).all()):  # no padding: nothing to mask or reverse
            return self._last_layer(self.lstm(x)[1][0])
        # cuDNN runs packed batches natively, and would copy the weights for every single-layer call
        if x.is_cuda:
            return self._encode_packed(x, lengths)
        return self._encode_mixed_lengths(x, lengths)

    def _encode_packed(self, x, lengths):
        return self._last_layer(self.lstm(self._packed(x, lengths))[1][0])

    def _encode_mixed_lengths(self, x, lengths):
        outputs = self._outputs_mixed_lengths(x, lengths)
        last = (lengths.to(x.device) - 1).view(-1, 1, 1).expand(-1, 1, outputs.shape[-1])
        forward_final = outputs.gather(1, last).squeeze(1)
        if not self.bidirectional:
            return forward_final
        d = outputs.shape[-1] // 2
        # forward half at the last token, backward half at the first, where the backward pass ends
        return torch.cat([forward_final[:, :d], outputs[:, 0, d:]], dim=-1)

    def sequence_outputs(self, tokens, lengths):
        """The last layer's output at every token [batch, time, output_size] (padding's
        positions hold whatever: a loss must skip them)."""
        x = self.embedding(tokens)
        if bool((lengths == tokens.shape[1]).all()):
            return self.lstm(x)[0]
        if x.is_cuda:
            packed = self.lstm(self._packed(x, lengths))[0]
            return pad_packed_sequence(packed, batch_first=True, total_length=x.shape[1])[0]
        return self._outputs_mixed_lengths(x, lengths)

    def _last_layer(self, final):
        """The last layer's final states from nn.LSTM's h_n [layers x directions, batch,
        d_model]."""
        return torch.cat([final[-2], final[-1]], dim=-1) if self.bidirectional else final[-1]

    @staticmethod
    def _packed(x, lengths):
        return pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)

    def _outputs_mixed_lengths(self, x, lengths):
        """The same function as the fused call, exact for padded molecules: the
        backward direction reads each molecule reversed in place, starting at
        its real last token, so no molecule depends on its batch's padding."""
        for layer in range(self.lstm.num_layers):
            if layer > 0:
                x = self.dropout(x)  # where nn.LSTM applies its dropout: between layers
            outputs = [self._run_layer(x, layer, "")]
            if self.bidirectional:
                outputs.append(
                    reverse_each(
                        self._run_layer(reverse_each(x, lengths), layer, "_reverse"), lengths
                    )
                )
            x = torch.cat(outputs, dim=-1)
        return x

    def _run_layer(self, x, layer, direction):
        """One layer, one direction of self.lstm, on [batch, time, features]."""
        weights = [
            getattr(self.lstm, f"{name}_l{layer}{direction}")
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
        zeros = x.new_zeros(1, x.shape[0], self.lstm.hidden_size)
        output, _, _ = torch.lstm(
            x, (zeros, zeros), weights, True, 1, 0.0, self.training, False, True
        )
        return output


class RNNPredictor(RNNEncoder):
    """The encoder, then a small MLP head: one output per task. With `extra_features` (k),
    the head reads k computed features of each molecule beside the encoding, each dropped
    with probability `feature_dropout` in training. `head_size`: the head's hidden units
    (default: the encoder's hidden size)."""

    def __init__(
        self, vocab_size, *, num_outputs=1, extra_features=0, feature_dropout=0.0, dropout=0.2,
        head_size=None, **encoder,
    ):  # fmt: skip
        super().__init__(vocab_size, dropout=dropout, **encoder)
        if feature_dropout and not extra_features:  # a flag that would silently do nothing
            raise PartorchError(
                f"--feature-dropout {feature_dropout:g} drops computed features, and the model "
                "reads none: add --extra-features, or leave --feature-dropout out"
            )
        self.num_outputs, self.extra_features = num_outputs, extra_features
        # Single features dropped, not the encoding: 2,048 Morgan counts let the head learn the
        # training molecules by their rare environments within a few epochs; without any one
        # of them it must spread its weight, as each tree of a random forest sees a subset.
        self.feature_dropout = nn.Dropout(feature_dropout)
        head_size = head_size or self.lstm.hidden_size
        self.head = nn.Sequential(
            nn.Linear(self.output_size + extra_features, head_size),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(head_size, num_outputs),
        )

    def forward(self, tokens, lengths, features=None):
        """Outputs [batch, num_outputs]: logits for classification, standardised values
        for regression."""
        encoding = self.dropout(self.encode(tokens, lengths))
        if self.extra_features:
            if features is None or features.shape[-1] != self.extra_features:
                got = "none" if features is None else features.shape[-1]
                raise PartorchError(f"the model reads {self.extra_features} features; got {got}")
            features = self.feature_dropout(features.to(encoding.dtype))
            encoding = torch.cat([encoding, features], dim=-1)
        return self.head(encoding)
