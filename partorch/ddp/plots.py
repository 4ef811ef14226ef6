"""Figures for people without TensorBoard: test ROC curves (classification),
predicted against measured (regression), and the training curves.
matplotlib is imported here only, when a figure is drawn."""

import numpy as np

from .files import atomic_write

MAX_LABELLED_CURVES = 6  # more tasks than this: curves without a legend entry each


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on clusters and CI
    import matplotlib.pyplot as plt

    return plt


def roc_figure(targets, probabilities, columns, noun="tasks"):
    """One ROC curve per column (a task, or a class against the others) that has both
    classes; the title gives their mean AUC."""
    from sklearn.metrics import roc_auc_score, roc_curve

    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(4.5, 4.5))
    aucs = []
    for j, column in enumerate(columns):
        present = ~np.isnan(targets[:, j])
        y, p = targets[present, j], probabilities[present, j]
        if len(np.unique(y)) < 2:
            continue
        fpr, tpr, _ = roc_curve(y, p)
        aucs.append(roc_auc_score(y, p))
        label = column if len(columns) <= MAX_LABELLED_CURVES else None
        ax.plot(fpr, tpr, label=label, alpha=1.0 if len(columns) == 1 else 0.5)
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="chance")
    title = "Test ROC curve" if len(columns) == 1 else f"Test ROC curves ({len(aucs)} {noun})"
    ax.set(
        xlabel="false positive rate",
        ylabel="true positive rate",
        title=f"{title}, AUC {np.mean(aucs):.3f}",
    )
    ax.legend(loc="lower right", fontsize=7)
    figure.tight_layout()
    return figure


def parity_figure(targets, predictions, columns):
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(4.5, 4.5))
    for j, column in enumerate(columns):
        present = ~np.isnan(targets[:, j])
        ax.scatter(
            targets[present, j],
            predictions[present, j],
            s=8,
            alpha=0.6,
            label=column if len(columns) <= MAX_LABELLED_CURVES else None,
        )
    low, high = np.nanmin(targets), np.nanmax(targets)
    ax.plot([low, high], [low, high], linestyle="--", color="grey", label="perfect")
    ax.set(xlabel="measured", ylabel="predicted", title="Test set: predicted against measured")
    ax.legend(loc="upper left", fontsize=7)
    figure.tight_layout()
    return figure


def training_curves_figure(history, best_epoch, score_name="roc_auc", score_title="ROC AUC"):
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    epochs = [row["epoch"] for row in history]
    figure, (loss_ax, score_ax) = plt.subplots(1, 2, figsize=(9, 3.6))
    loss_ax.plot(epochs, [row["train_loss"] for row in history], label="train")
    for split, colour in (("dev", "C1"), ("test", "C2")):
        # test figures exist for the epochs run with --test-every-epoch: a resumed run may
        # have them for its first epochs only
        scored = [row for row in history if f"{split}_loss" in row]
        if scored:
            at = [row["epoch"] for row in scored]
            loss_ax.plot(at, [row[f"{split}_loss"] for row in scored], label=split, color=colour)
            score_ax.plot(
                at, [row[f"{split}_{score_name}"] for row in scored], label=split, color=colour
            )
    loss_ax.set(xlabel="epoch", ylabel="loss", title="Loss")
    score_ax.set(xlabel="epoch", ylabel=score_title, title=score_title)
    for ax in (loss_ax, score_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(best_epoch, color="grey", linestyle=":", label=f"best epoch ({best_epoch})")
        ax.legend()
    figure.tight_layout()
    return figure


def save_figure(figure, path):
    """A PNG written whole or not at all (a full disk leaves no half image)."""
    atomic_write(path, lambda f: figure.savefig(f, format="png", dpi=110))
    _pyplot().close(figure)
