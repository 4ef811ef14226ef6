"""Figures for people without TensorBoard: a test ROC curve and the training
curves, as PNG files (and the ROC curve as a TensorBoard figure too)."""
import matplotlib

matplotlib.use("Agg")  # no display on clusters and CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from sklearn.metrics import roc_curve  # noqa: E402


def roc_figure(labels, probabilities, title):
    fpr, tpr, _ = roc_curve(labels, probabilities)
    figure, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot(fpr, tpr, label="model")
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="chance")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title=title)
    ax.legend(loc="lower right")
    figure.tight_layout()
    return figure


def training_curves_figure(history, best_epoch):
    epochs = [row["epoch"] for row in history]
    figure, (loss_ax, auc_ax) = plt.subplots(1, 2, figsize=(9, 3.6))
    loss_ax.plot(epochs, [row["train_loss"] for row in history], label="train")
    loss_ax.plot(epochs, [row["dev_loss"] for row in history], label="dev")
    if "test_loss" in history[0]:
        loss_ax.plot(epochs, [row["test_loss"] for row in history], label="test")
        auc_ax.plot(epochs, [row["test_roc_auc"] for row in history], label="test", color="C2")
    loss_ax.set(xlabel="epoch", ylabel="loss", title="Loss")
    auc_ax.plot(epochs, [row["dev_roc_auc"] for row in history], label="dev", color="C1")
    auc_ax.set(xlabel="epoch", ylabel="ROC AUC", title="ROC AUC")
    for ax in (loss_ax, auc_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(best_epoch, color="grey", linestyle=":", label=f"best epoch ({best_epoch})")
        ax.legend()
    figure.tight_layout()
    return figure


def save_figure(figure, path):
    figure.savefig(path, dpi=110)
    plt.close(figure)
