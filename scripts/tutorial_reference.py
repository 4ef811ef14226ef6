"""The workshop tutorial's data path and loop, rebuilt for `benchmark.py
--reference`: it exists to be measured against, not to train with.

As the tutorial does it: each molecule is tokenized in `__getitem__`, random
batches of 256 go through `pack_padded_sequence` into one multi-layer
`nn.LSTM`, the DataLoader's workers are started afresh every epoch, and every
step reads the loss back to the host and writes it to TensorBoard.
"""
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.data import DataLoader, Dataset


class TokenizeOnReadDataset(Dataset):
    def __init__(self, smiles, labels, tokenizer):
        self.smiles, self.labels, self.tokenizer = smiles, labels, tokenizer

    def __len__(self):
        return len(self.smiles)

    def __getitem__(self, i):
        return torch.tensor(self.tokenizer.encode(self.smiles[i])), torch.tensor(float(self.labels[i]))


def collate_unsorted(items):
    ids, labels = zip(*items)
    lengths = torch.tensor([len(t) for t in ids])
    return nn.utils.rnn.pad_sequence(ids, batch_first=True), lengths, torch.stack(labels)


class PackedRNNPredictor(nn.Module):
    def __init__(self, vocab_size, embedding_dim=128, d_model=128, num_layers=3, bidirectional=True, dropout=0.2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.lstm = nn.LSTM(embedding_dim, d_model, num_layers=num_layers, bidirectional=bidirectional,
                            dropout=dropout, batch_first=True)
        directions = 2 if bidirectional else 1
        self.head = nn.Sequential(nn.Linear(directions * d_model, d_model), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(d_model, 1))

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embedding(tokens), lengths, batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        return self.head(torch.cat([h_n[-2], h_n[-1]], dim=-1)).squeeze(-1)


def reference_batches(smiles, labels, tokenizer, batch_size=256, num_workers=2):
    """Endless batches; a new DataLoader iterator (new worker processes) per epoch."""
    loader = DataLoader(TokenizeOnReadDataset(smiles, labels, tokenizer), batch_size=batch_size, shuffle=True,
                        collate_fn=collate_unsorted, num_workers=num_workers)
    while True:
        yield from loader


def reference_step(model, optimizer, batch, writer, step):
    tokens, lengths, labels = batch
    loss = nn.functional.binary_cross_entropy_with_logits(model(tokens, lengths), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    writer.add_scalar("Loss/train", loss.item(), step)  # a host sync and a write, every step
    return loss.detach()
