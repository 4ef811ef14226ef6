"""The same model, split and optimiser trained the way PyTorch Lightning's
documentation shows DDP: a LightningModule, plain DataLoaders (random
batches, each molecule tokenized when it is read) and
`Trainer(strategy="ddp")`, which starts its own processes.

    pip install -e '.[bench]'
    OMP_NUM_THREADS=1 python benchmarks/lightning_reference.py dataset/BBBP.csv \\
        --devices 2 --epochs 5

`benchmarks/speed.py --lightning` runs it beside partorch's DDP script at equal
epochs. Written to JSON (--out): training samples/s over whole epochs (no
validation inside the clock) and the test ROC AUC of the best dev epoch.
"""

import argparse
import json
import time

import lightning as L
import torch
from torch.utils.data import DataLoader
from torchmetrics.classification import BinaryAUROC
from tutorial_reference import TokenizeOnReadDataset, collate_unsorted

from partorch import RNNPredictor, SmilesTokenizer, read_molecule_csv, split_indices


class LitClassifier(L.LightningModule):
    def __init__(self, vocab_size, lr):
        super().__init__()
        self.model, self.lr = RNNPredictor(vocab_size), lr
        self.dev_auc, self.test_auc = BinaryAUROC(), BinaryAUROC()

    def training_step(self, batch, _):
        tokens, lengths, labels = batch
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            self.model(tokens, lengths).squeeze(-1), labels
        )
        self.log("train_loss", loss)
        return loss

    def _score(self, batch, metric, name):
        tokens, lengths, labels = batch
        metric.update(self.model(tokens, lengths).squeeze(-1), labels.long())
        self.log(name, metric, on_epoch=True)  # torchmetrics gathers every rank's share

    def validation_step(self, batch, _):
        self._score(batch, self.dev_auc, "dev_roc_auc")

    def test_step(self, batch, _):
        self._score(batch, self.test_auc, "test_roc_auc")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=1e-4)


class TrainingClock(L.Callback):
    """This rank's training batches: molecules, and seconds from each epoch's
    start to its last batch (Lightning validates before on_train_epoch_end);
    and (training seconds so far, dev ROC AUC) after every epoch."""

    def __init__(self):
        self.seconds, self.samples, self.curve = 0.0, 0, []

    def on_train_epoch_start(self, trainer, module):
        self.started = self.last_batch = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.samples += len(batch[2])
        self.last_batch = time.perf_counter()

    def on_validation_epoch_end(self, trainer, module):
        if not trainer.sanity_checking:
            self.curve.append(
                (
                    self.seconds + self.last_batch - self.started,
                    float(trainer.callback_metrics["dev_roc_auc"]),
                )
            )

    def on_train_epoch_end(self, trainer, module):
        self.seconds += self.last_batch - self.started


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset")
    parser.add_argument("--smiles-column", default="smiles")
    parser.add_argument("--label-column", default="p_np")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument(
        "--batch-size", type=int, default=64, help="global batch (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=1729)
    parser.add_argument("--out", help="JSON file for the figures")
    parser.add_argument(
        "--work-dir", default="runs/lightning", help="checkpoints (default: %(default)s)"
    )
    args = parser.parse_args()
    L.seed_everything(args.seed)
    table = read_molecule_csv(args.dataset, args.smiles_column, [args.label_column])
    labels = table.labels[:, 0]
    splits = split_indices(
        len(labels), args.seed, classes=labels.astype(int)
    )  # partorch's default split
    tokenizer = SmilesTokenizer.build(table.smiles)

    def loader(indices, shuffle):
        dataset = TokenizeOnReadDataset(
            [table.smiles[i] for i in indices], labels[indices], tokenizer
        )
        return DataLoader(
            dataset,
            batch_size=args.batch_size // args.devices,
            shuffle=shuffle,
            collate_fn=collate_unsorted,
        )

    clock = TrainingClock()
    trainer = L.Trainer(
        accelerator="auto",
        devices=args.devices,
        strategy="ddp",
        max_epochs=args.epochs,
        callbacks=[clock, L.pytorch.callbacks.ModelCheckpoint(monitor="dev_roc_auc", mode="max")],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.work_dir,
    )
    module = LitClassifier(tokenizer.vocab_size, lr=1e-3)
    trainer.fit(module, loader(splits.train, True), loader(splits.dev, False))
    samples = torch.tensor([clock.samples], dtype=torch.float64)
    samples = trainer.strategy.reduce(samples, reduce_op="sum")
    test = trainer.test(module, loader(splits.test, False), ckpt_path="best", verbose=False)[0][
        "test_roc_auc"
    ]
    if trainer.is_global_zero:
        figures = dict(
            samples_per_second=float(samples) / clock.seconds,
            test_roc_auc=test,
            epochs=args.epochs,
            devices=args.devices,
            global_batch=args.batch_size,
            dev_curve=clock.curve,
        )
        print(
            f"Lightning: {figures['samples_per_second']:.1f} samples/s, test ROC AUC {test:.4f}",
            flush=True,
        )
        if args.out:
            with open(args.out, "w") as out:
                json.dump(figures, out)


if __name__ == "__main__":
    main()
