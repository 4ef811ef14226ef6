"""The model: token embedding, LSTM layers, a small MLP head, one output per task.

No optimizer, no loss and no distributed logic live here.
"""
import torch
from torch import nn


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


class RNNPredictor(nn.Module):
    def __init__(self, vocab_size, *, embedding_dim=128, d_model=128, num_layers=3,
                 bidirectional=True, dropout=0.2, num_outputs=1):
        super().__init__()
        self.bidirectional, self.num_outputs = bidirectional, num_outputs
        directions = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        # One single-layer LSTM per layer and direction (rather than one
        # multi-layer nn.LSTM) so the backward direction can read each
        # molecule reversed in place; on CPU this is as fast as the fused call.
        self.forward_layers = nn.ModuleList(
            nn.LSTM(embedding_dim if i == 0 else directions * d_model, d_model, batch_first=True)
            for i in range(num_layers))
        self.backward_layers = nn.ModuleList(
            nn.LSTM(embedding_dim if i == 0 else directions * d_model, d_model, batch_first=True)
            for i in range(num_layers)) if bidirectional else nn.ModuleList()
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(
            nn.Linear(directions * d_model, d_model), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_model, num_outputs))

    def encode(self, tokens, lengths):
        """Last-layer summary: forward state at the last token, plus the
        backward state after reading the whole molecule back to its first."""
        x = self.embedding(tokens)
        for i, forward_lstm in enumerate(self.forward_layers):
            if i > 0:
                x = self.dropout(x)
            outputs = [forward_lstm(x)[0]]
            if self.bidirectional:
                backward, _ = self.backward_layers[i](reverse_each(x, lengths))
                outputs.append(reverse_each(backward, lengths))
            x = torch.cat(outputs, dim=-1)
        last = (lengths.to(tokens.device) - 1).view(-1, 1, 1).expand(-1, 1, x.shape[-1])
        forward_final = x.gather(1, last).squeeze(1)
        if not self.bidirectional:
            return forward_final
        d = x.shape[-1] // 2
        # Forward half at the last token, backward half at the first token,
        # where the backward pass ends.
        return torch.cat([forward_final[:, :d], x[:, 0, d:]], dim=-1)

    def forward(self, tokens, lengths):
        """Outputs [batch, num_outputs]: logits for classification, standardised values for regression."""
        return self.head(self.dropout(self.encode(tokens, lengths)))
