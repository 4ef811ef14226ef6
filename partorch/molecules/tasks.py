"""What is learned: the loss and the metrics of a task, chosen at
construction. Binary classification (one or several 0/1 columns; empty cells
are missing labels, masked out of loss and metrics), multi-class
classification (one column of whole-number classes: softmax, cross-entropy,
macro one-vs-rest ROC AUC) or regression (targets standardised with the
training split's mean and deviation; metrics in the original units).

The training loop only calls `task.loss(outputs, targets)` (a sum, see
there), `task.metrics(targets, outputs)` and `task.is_better(a, b)`.
"""

import math

import numpy as np
import torch
from torch import nn

from ..ddp.errors import DataError, PartorchError
from ..ddp.logs import log

TASK_KINDS = ("auto", "classification", "multiclass", "regression")
CLASS_WEIGHTS = ("none", "balanced")
# float64's smallest normal number and its spacing just below 1: where outputs_for clips
_TINY, _EPSILON = np.finfo(np.float64).tiny, np.finfo(np.float64).eps


class EvaluationError(PartorchError):
    pass


class Task:
    kind = score_name = score_tag = score_title = needs = ""
    higher_is_better = True

    def __init__(self, columns):
        self.columns = list(columns)
        self._tensors = {}

    def _constant(self, name, like):
        """The per-column constant `name` as a tensor beside `like`, built
        once per dtype and device rather than every step (on a GPU each
        build would be a copy from the host)."""
        key = (name, like.dtype, like.device)
        if key not in self._tensors:
            self._tensors[key] = torch.as_tensor(
                getattr(self, name), dtype=like.dtype, device=like.device
            )
        return self._tensors[key]

    @property
    def output_columns(self):
        """The names of `predictions(outputs)`'s columns: one per label column here (a
        multi-class task has one per class)."""
        return self.columns

    @property
    def worst_score(self):
        return -math.inf if self.higher_is_better else math.inf

    def is_better(self, score, best):
        return score > best if self.higher_is_better else score < best

    def loss(self, outputs, targets):
        """Summed over labelled cells, divided by the number of tasks: a
        per-molecule sum, so that dividing it by a fixed batch size gives
        gradients that do not depend on how a batch is split across ranks."""
        present = ~torch.isnan(targets)
        # zeros in the empty cells first: a NaN there would poison the gradient even when masked
        cells = self.cell_losses(outputs, torch.where(present, targets, torch.zeros_like(targets)))
        return torch.where(present, cells, torch.zeros_like(cells)).sum() / len(self.columns)

    def metrics(self, targets, outputs):
        """{"loss", score_name, ...}: the score is the mean over the tasks
        that can be scored; "per_task" is added when there are several."""
        targets, outputs = (
            np.asarray(targets, dtype=np.float64),
            np.asarray(outputs, dtype=np.float64),
        )
        present = ~np.isnan(targets)
        with torch.no_grad():
            cells = self.cell_losses(
                torch.as_tensor(outputs), torch.as_tensor(np.where(present, targets, 0.0))
            )
        predictions = self.predictions(outputs)
        per_task = {
            column: self.task_metrics(targets[present[:, j], j], predictions[present[:, j], j])
            for j, column in enumerate(self.columns)
        }
        scored = [m[self.score_name] for m in per_task.values() if self.score_name in m]
        if not scored:
            raise EvaluationError(f"no task can be scored: {self.score_title} needs {self.needs}")
        result = {
            "loss": float(cells.numpy()[present].mean()),
            self.score_name: float(np.mean(scored)),
        }
        if len(self.columns) == 1:
            return {**result, **per_task[self.columns[0]]}
        return {**result, "tasks_scored": len(scored), "per_task": per_task}

    def check_split(self, name, targets):
        """Stop before training when no task could be scored on this split."""
        targets = np.asarray(targets, dtype=np.float64)
        if not any(self.scorable(t[~np.isnan(t)]) for t in targets.T):
            raise DataError(
                f"the {name} set ({len(targets)} molecules) has no task that can be scored: "
                f"{self.score_title} needs {self.needs}; use more data or another seed"
            )

    def figures(self, split, metrics):
        """Flat figures of one split for an epoch's log: loss, score, and the score per task."""
        figures = {
            f"{split}_loss": metrics["loss"],
            f"{split}_{self.score_name}": metrics[self.score_name],
        }
        if "per_task" in metrics:
            figures[f"{split}_per_task"] = {
                column: m[self.score_name]
                for column, m in metrics["per_task"].items()
                if self.score_name in m
            }
        return figures

    def scalars(self, row):
        """TensorBoard's {tag: value} for an epoch's row of figures: losses, scores (per
        task too, when there are several), throughput and learning rate."""
        scalars = {"Loss/train": row["train_loss"]}
        for split in [name for name in ("dev", "test") if f"{name}_loss" in row]:
            scalars[f"Loss/{split}"] = row[f"{split}_loss"]
            scalars[f"{self.score_tag}/{split}"] = row[f"{split}_{self.score_name}"]
            for column, value in row.get(f"{split}_per_task", {}).items():
                scalars[f"{self.score_tag}/{split}/{column}"] = value
        scalars["Throughput/train_samples_per_second"] = row["samples_per_second"]
        scalars["LR"] = row["lr"]
        if "grad_norm" in row:  # --clip-grad-norm: the epoch's mean norm before clipping
            scalars["Grad/norm"] = row["grad_norm"]
        return scalars

    def final_line(self, metrics):
        return f"Final test {self.score_title}: {metrics[self.score_name]:.4f}"

    def to_dict(self):
        return {"kind": self.kind, "columns": self.columns}


class BinaryClassification(Task):
    kind, score_name, score_tag, score_title = "classification", "roc_auc", "ROC_AUC", "ROC AUC"
    needs = "both classes among a task's labelled molecules"
    higher_is_better = True

    def __init__(self, columns, positive_weight=None):
        """positive_weight: one per column, multiplying the loss of its
        positive cells (None: 1, the plain cross-entropy)."""
        super().__init__(columns)
        self.positive_weight = (
            None if positive_weight is None else [float(w) for w in positive_weight]
        )

    @classmethod
    def balanced(cls, columns, labels):
        """Each column's positives weighted by its training negatives per
        positive: a rare class (HIV's 3.5 %) then carries half the loss."""
        labels = np.asarray(labels, dtype=np.float64).reshape(len(labels), -1)
        positives, negatives = (labels == 1).sum(axis=0), (labels == 0).sum(axis=0)
        return cls(
            columns,
            np.where((positives > 0) & (negatives > 0), negatives / np.maximum(positives, 1), 1.0),
        )

    def cell_losses(self, outputs, targets):
        weight = (
            None if self.positive_weight is None else self._constant("positive_weight", outputs)
        )
        return nn.functional.binary_cross_entropy_with_logits(
            outputs, targets.to(outputs.dtype), reduction="none", pos_weight=weight
        )

    def predictions(self, outputs):
        """Probabilities of class 1."""
        return 1 / (1 + np.exp(-np.asarray(outputs, dtype=np.float64)))

    def outputs_for(self, predictions):
        """The logits of given probabilities (another model's), to score them with `metrics`.
        Clipped only at float64's ends: an overfit model's test probabilities go down to 1e-30,
        and a coarser clip would make them ties and change the ROC AUC."""
        p = np.clip(np.asarray(predictions, dtype=np.float64), _TINY, 1 - _EPSILON / 2)
        return np.log(p) - np.log1p(-p)

    def scorable(self, targets):
        return len(np.unique(targets)) == 2

    def task_metrics(self, targets, probabilities):
        from sklearn.metrics import roc_auc_score

        if not self.scorable(targets):
            return {"molecules": len(targets)}  # ROC AUC undefined: left out of the mean
        if not np.isfinite(probabilities).all():  # a diverged model: its epoch ends the run
            return {"roc_auc": math.nan, "molecules": len(targets)}
        return {"roc_auc": float(roc_auc_score(targets, probabilities)), "molecules": len(targets)}

    def to_dict(self):
        weights = {} if self.positive_weight is None else {"positive_weight": self.positive_weight}
        return {**super().to_dict(), **weights}


class MulticlassClassification(Task):
    """One label column whose values are classes (whole numbers, e.g. 0/1/2): one output
    per class, softmax cross-entropy, and the macro mean of the one-vs-rest ROC AUCs."""

    kind, score_name, score_tag, score_title = "multiclass", "roc_auc", "ROC_AUC", "ROC AUC"
    needs = "two classes or more among the labelled molecules"
    higher_is_better = True

    def __init__(self, columns, classes):
        super().__init__(columns)
        if len(self.columns) != 1:
            raise DataError(f"a multi-class task has one label column, not {len(self.columns)}")
        self.classes = [float(c) for c in classes]

    @property
    def output_columns(self):
        return [f"{self.columns[0]}_{c:g}" for c in self.classes]

    def class_index(self, labels):
        """Each label's class number 0..K-1 (a missing label's stands in: it is masked)."""
        classes = self._constant("classes", labels)
        index = torch.searchsorted(classes, labels.contiguous())
        return index.clamp(max=len(self.classes) - 1)

    def cell_losses(self, outputs, targets):
        index = self.class_index(targets.to(outputs.dtype))[:, 0]
        losses = nn.functional.cross_entropy(outputs, index, reduction="none")
        return losses[:, None]  # one cell a molecule, as the one label column has

    def predictions(self, outputs):
        """Each class's probability, [molecules, classes]."""
        return torch.softmax(torch.as_tensor(outputs, dtype=torch.float64), dim=1).numpy()

    def outputs_for(self, predictions):
        return np.log(np.clip(np.asarray(predictions, dtype=np.float64), 1e-12, 1.0))

    def scorable(self, targets):
        return len(np.unique(targets)) >= 2

    def metrics(self, targets, outputs):
        """{"loss", "roc_auc": the macro mean over the classes present with others, "per_class":
        each class's one-vs-rest ROC AUC, "molecules"}."""
        targets = np.asarray(targets, dtype=np.float64).reshape(len(targets), -1)[:, 0]
        outputs = np.asarray(outputs, dtype=np.float64)
        present = ~np.isnan(targets)
        if not self.scorable(targets[present]):
            raise EvaluationError(f"no task can be scored: {self.score_title} needs {self.needs}")
        with torch.no_grad():
            labels = torch.as_tensor(targets[present])[:, None]
            loss = self.cell_losses(torch.as_tensor(outputs[present]), labels).mean().item()
        index = self.class_index(labels)[:, 0].numpy()
        per_class = self._per_class(index, self.predictions(outputs[present]))
        scored = [v for v in per_class.values() if v is not None]
        return {
            "loss": loss,
            "roc_auc": float(np.mean(scored)),
            "per_class": per_class,
            "molecules": int(present.sum()),
        }

    def _per_class(self, index, probabilities):
        """One-vs-rest ROC AUC of each class; None for a class absent from (or alone in) it."""
        from sklearn.metrics import roc_auc_score

        per_class = {}
        for k, name in enumerate(self.output_columns):
            is_k = index == k
            if is_k.all() or not is_k.any():
                per_class[name] = None
            elif not np.isfinite(probabilities).all():  # a diverged model: its epoch ends the run
                per_class[name] = math.nan
            else:
                per_class[name] = float(roc_auc_score(is_k, probabilities[:, k]))
        return per_class

    def one_vs_rest(self, targets):
        """Targets as one 0/1 column per class (NaN where unlabelled), beside `predictions`."""
        targets = np.asarray(targets, dtype=np.float64).reshape(len(targets), -1)[:, :1]
        one_hot = (targets == np.asarray(self.classes)[None, :]).astype(np.float64)
        return np.where(np.isnan(targets), np.nan, one_hot)

    def to_dict(self):
        return {**super().to_dict(), "classes": self.classes}


class Regression(Task):
    kind, score_name, score_tag, score_title = "regression", "rmse", "RMSE", "RMSE"
    needs = "labelled molecules"
    higher_is_better = False

    def __init__(self, columns, mean, std):
        super().__init__(columns)
        self.mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        self.std = np.asarray(std, dtype=np.float64).reshape(-1)

    @classmethod
    def from_training_labels(cls, columns, labels):
        """Standardise with the *training* split only: dev and test stay unseen."""
        labels = np.asarray(labels, dtype=np.float64).reshape(len(labels), -1)
        labelled = ~np.isnan(labels)
        counts = np.maximum(labelled.sum(axis=0), 1)
        mean = np.where(labelled, labels, 0.0).sum(axis=0) / counts
        std = np.sqrt((np.where(labelled, labels - mean, 0.0) ** 2).sum(axis=0) / counts)
        # a column without training labels gets a finite scale (0, 1): a NaN would poison every
        # gradient
        return cls(columns, mean, np.where(std > 0, std, 1.0))

    def cell_losses(self, outputs, targets):
        mean, std = self._constant("mean", outputs), self._constant("std", outputs)
        return (outputs - (targets.to(outputs.dtype) - mean) / std) ** 2

    def predictions(self, outputs):
        """Back in the units of the label columns."""
        return np.asarray(outputs, dtype=np.float64) * self.std + self.mean

    def outputs_for(self, predictions):
        """Standardised values of given predictions (another model's), to score them with
        `metrics`."""
        return (np.asarray(predictions, dtype=np.float64) - self.mean) / self.std

    def scorable(self, targets):
        return len(targets) > 0

    def task_metrics(self, targets, predictions):
        if not self.scorable(targets):
            return {"molecules": 0}
        errors = predictions - targets
        result = {
            "rmse": float(np.sqrt(np.mean(errors**2))),
            "mae": float(np.mean(np.abs(errors))),
            "molecules": len(targets),
        }
        spread = np.sum((targets - targets.mean()) ** 2)
        if spread > 0:
            result["r2"] = float(1 - np.sum(errors**2) / spread)
        return result

    def to_dict(self):
        return {**super().to_dict(), "mean": self.mean.tolist(), "std": self.std.tolist()}


def task_from_dict(spec):
    """The task saved beside a model (task.json)."""
    if spec.get("kind") == "classification":
        return BinaryClassification(spec["columns"], spec.get("positive_weight"))
    if spec.get("kind") == "multiclass":
        return MulticlassClassification(spec["columns"], spec["classes"])
    if spec.get("kind") == "regression":
        return Regression(spec["columns"], spec["mean"], spec["std"])
    raise PartorchError(f"not a partorch task description: {str(spec)[:80]}")


def _binary_share(values):
    return np.isin(values, (0.0, 1.0)).mean() if len(values) else 1.0


# A column that is almost all 0/1 is a binary column with typos, not a regression target.
MOSTLY_BINARY = 0.9


def choose_task_kind(requested, table):
    """`requested` unless it is "auto": classification when every label is
    0 or 1, multiclass for one column of 3 to 20 whole numbers, regression
    for other numbers. A column that is almost all 0/1 is taken for a binary
    column with typos, and whole numbers that cannot be classes here (two
    values other than 0/1, or several columns of them) for a mistake: errors,
    never a silent regression."""
    if requested not in TASK_KINDS:
        raise DataError(f"unknown task {requested!r}: choose one of {', '.join(TASK_KINDS)}")
    labels = table.labels[~np.isnan(table.labels)]
    if requested == "auto":
        kind, why = _auto_kind(table, labels)
    else:
        kind, why = requested, f"--task {requested}"
    if kind == "classification" and _binary_share(labels) < 1.0:
        _reject_non_binary(table)
    if kind == "multiclass":
        _check_classes(table, labels)
    log.info("task: %s on %s (%s)", kind, ", ".join(table.label_columns), why)
    return kind


# Whole numbers with this many values are classes, not measurements (issue 39's rule).
MIN_CLASSES, MAX_CLASSES = 3, 20


def _auto_kind(table, labels):
    if _binary_share(labels) >= MOSTLY_BINARY:
        return "classification", "every label is 0 or 1"
    values = np.unique(labels)
    whole = bool(np.all(values == np.round(values)))
    if whole and MIN_CLASSES <= len(values) <= MAX_CLASSES and len(table.label_columns) == 1:
        shown = ", ".join(f"{v:g}" for v in values)
        return "multiclass", f"the labels are the {len(values)} whole numbers {shown}: classes"
    if whole and len(values) <= MAX_CLASSES:
        _reject_class_numbers(table, values)
    return "regression", "the labels are numbers other than 0 and 1"


def _reject_class_numbers(table, values):
    """Two classes coded otherwise than 0/1, or classes in several columns: regressing on
    them would be a silent wrong result."""
    shown = ", ".join(f"{v:g}" for v in values)
    what = (
        "two classes: write them as 0 and 1 for classification"
        if len(values) == 2
        else "classes in several columns, which a multi-class task cannot train (one at a time)"
    )
    raise DataError(
        f"{table.source}: the labels are the whole numbers {shown}: {what}; pass --task "
        "regression if they are measurements to predict"
    )


def _check_classes(table, labels):
    values = np.unique(labels)
    if len(table.label_columns) != 1:
        raise DataError(
            f"{table.source}: --task multiclass trains one label column, not "
            f"{len(table.label_columns)} ({', '.join(table.label_columns)})"
        )
    if not np.all(values == np.round(values)) or len(values) < 2:
        shown = ", ".join(f"{v:g}" for v in values[:6]) + (", ..." if len(values) > 6 else "")
        raise DataError(
            f"{table.source}: column {table.label_columns[0]!r} must hold two or more whole-"
            f"number classes for --task multiclass; it holds {shown}"
        )


def _reject_non_binary(table):
    bad = ~np.isnan(table.labels) & ~np.isin(table.labels, (0.0, 1.0))
    molecule, column = np.nonzero(bad)
    examples = [
        f"row {table.rows[m]}: {f'{table.labels[m, c]:g}'!r}"
        for m, c in zip(molecule[:5], column[:5])
    ]
    raise DataError(
        f"{table.source}: column {table.label_columns[column[0]]!r} must hold 0 or 1 for "
        f"classification; {int(bad.sum())} cells do not, first: {'; '.join(examples)} "
        "(--task multiclass treats whole numbers as classes, --task regression as numbers)"
    )


def build_task(kind, table, splits, class_weight="none"):
    """The task for a chosen kind (regression learns its scale, balanced
    classes their weights, from the training split), after checking that
    dev and test can be scored."""
    if class_weight not in CLASS_WEIGHTS:
        raise DataError(
            f"unknown class weight {class_weight!r}: choose one of {', '.join(CLASS_WEIGHTS)}"
        )
    if class_weight != "none" and kind != "classification":
        raise DataError(
            f"{table.source}: --class-weight {class_weight} weighs classes; this is a {kind} task"
        )
    if kind == "classification" and class_weight == "balanced":
        task = BinaryClassification.balanced(table.label_columns, table.labels[splits.train])
    elif kind == "classification":
        task = BinaryClassification(table.label_columns)
    elif kind == "multiclass":  # every class of the file: one only in test still gets an output
        classes = np.unique(table.labels[~np.isnan(table.labels)])
        task = MulticlassClassification(table.label_columns, classes)
    else:
        task = Regression.from_training_labels(table.label_columns, table.labels[splits.train])
    for name in ("dev", "test"):
        try:
            task.check_split(name, table.labels[getattr(splits, name)])
        except DataError as exc:
            raise DataError(f"{table.source}: {exc}") from None
    return task
