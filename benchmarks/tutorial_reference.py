"""The workshop tutorial's data path and loop, rebuilt to be measured
against, not to train with: `benchmarks/speed.py --reference` times it, and

    python benchmarks/tutorial_reference.py dataset/BBBP.csv --epochs 10 --seed 1729

trains with it for a fixed number of epochs and prints its test ROC AUC, to
compare with `basic_neural_network.py --epochs 10 --patience 0` at equal epochs.

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
        return torch.tensor(self.tokenizer.encode(self.smiles[i])), torch.tensor(
            float(self.labels[i])
        )


def collate_unsorted(items):
    ids, labels = zip(*items)
    lengths = torch.tensor([len(t) for t in ids])
    return nn.utils.rnn.pad_sequence(ids, batch_first=True), lengths, torch.stack(labels)


class PackedRNNPredictor(nn.Module):
    def __init__(
        self,
        vocab_size,
        embedding_dim=128,
        d_model=128,
        num_layers=3,
        bidirectional=True,
        dropout=0.2,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.lstm = nn.LSTM(
            embedding_dim,
            d_model,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=True,
        )
        directions = 2 if bidirectional else 1
        self.head = nn.Sequential(
            nn.Linear(directions * d_model, d_model),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_model, 1),
        )

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(
            self.embedding(tokens), lengths, batch_first=True, enforce_sorted=False
        )
        _, (h_n, _) = self.lstm(packed)
        return self.head(torch.cat([h_n[-2], h_n[-1]], dim=-1)).squeeze(-1)


def reference_batches(smiles, labels, tokenizer, batch_size=256, num_workers=2):
    """Endless batches; a new DataLoader iterator (new worker processes) per epoch."""
    loader = DataLoader(
        TokenizeOnReadDataset(smiles, labels, tokenizer),
        batch_size=batch_size,
        shuffle=True,
        collate_fn=collate_unsorted,
        num_workers=num_workers,
    )
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


@torch.no_grad()
def _roc_auc(model, loader):
    from sklearn.metrics import roc_auc_score

    model.eval()
    labels, scores = [], []
    for tokens, lengths, batch_labels in loader:
        scores += torch.sigmoid(model(tokens, lengths)).tolist()
        labels += batch_labels.tolist()
    return roc_auc_score(labels, scores)


def main():
    """Train with the tutorial's loop for a fixed number of epochs and print
    its test ROC AUC (best dev epoch's weights, as the tutorial keeps them),
    to compare accuracy with partorch at equal epochs."""
    import argparse
    import copy
    import tempfile

    from torch.utils.tensorboard import SummaryWriter

    from partorch import SmilesTokenizer, read_molecule_csv, split_indices

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("dataset")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1729)
    parser.add_argument("--label-column", default="p_np")
    parser.add_argument(
        "--num-workers", type=int, default=2, help="DataLoader workers (the tutorial's: 2)"
    )
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    table = read_molecule_csv(args.dataset, label_columns=[args.label_column])
    labels = table.labels[:, 0]
    splits = split_indices(len(labels), args.seed, classes=labels.astype(int))
    tokenizer = SmilesTokenizer.build(table.smiles)

    def loader(indices, shuffle):
        dataset = TokenizeOnReadDataset(
            [table.smiles[i] for i in indices], labels[indices], tokenizer
        )
        return DataLoader(
            dataset,
            batch_size=256,
            shuffle=shuffle,
            collate_fn=collate_unsorted,
            num_workers=args.num_workers,
        )

    train, dev, test = (
        loader(splits.train, True),
        loader(splits.dev, False),
        loader(splits.test, False),
    )
    model = PackedRNNPredictor(tokenizer.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    best_auc, best_state, step = -1.0, None, 0
    with (
        tempfile.TemporaryDirectory(prefix="reference-tb-") as events,
        SummaryWriter(events) as writer,
    ):
        for epoch in range(1, args.epochs + 1):
            model.train()
            for batch in train:
                reference_step(model, optimizer, batch, writer, step)
                step += 1
            auc = _roc_auc(model, dev)
            print(f"epoch {epoch} dev ROC AUC {auc:.4f}", flush=True)
            if auc > best_auc:
                best_auc, best_state = auc, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    print(f"Final test ROC AUC: {_roc_auc(model, test):.4f}")


if __name__ == "__main__":
    main()
