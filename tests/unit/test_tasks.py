"""Tasks own the loss and the metrics: binary, multi-task with missing labels, multi-class,
regression."""

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
import torch

from partorch.molecules.splits import Splits
from partorch.molecules.table import DataError, MoleculeTable
from partorch.molecules.tasks import (
    BinaryClassification,
    MulticlassClassification,
    Regression,
    build_task,
    choose_task_kind,
    task_from_dict,
)

NAN = float("nan")


def _table(labels, columns=("y",)):
    labels = np.asarray(labels, dtype=float).reshape(len(labels), -1)
    return MoleculeTable(
        ["C"] * len(labels), labels, list(columns), np.arange(len(labels)) + 2, [], "t.csv"
    )


def test_missing_labels_are_masked_out_of_the_loss_and_its_gradient():
    task = BinaryClassification(["a", "b"])
    outputs = torch.tensor([[0.5, 2.0], [-1.0, 3.0]], requires_grad=True)
    targets = torch.tensor([[1.0, NAN], [0.0, 1.0]])
    loss = task.loss(outputs, targets)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expected = (
        bce(outputs[0, 0], targets[0, 0])
        + bce(outputs[1, 0], targets[1, 0])
        + bce(outputs[1, 1], targets[1, 1])
    ) / 2  # summed over labelled cells, divided by the task count
    assert torch.allclose(loss, expected)
    loss.backward()
    assert torch.isfinite(outputs.grad).all() and outputs.grad[0, 1] == 0


def test_the_score_is_the_mean_over_tasks_with_both_classes():
    task = BinaryClassification(["a", "b", "c"])
    targets = np.array([[1, 0, 1], [0, 0, NAN], [1, 0, 0], [0, 0, 1]], dtype=float)
    outputs = np.array([[2.0, 0.1, 1.0], [-1.0, 0.2, 5.0], [0.5, 0.3, -2.0], [1.0, 0.4, 0.5]])
    metrics = task.metrics(targets, outputs)
    a = roc_auc_score(targets[:, 0], outputs[:, 0])
    c = roc_auc_score([1, 0, 1], [1.0, -2.0, 0.5])  # the missing cell is left out
    assert metrics["roc_auc"] == pytest.approx((a + c) / 2) and metrics["tasks_scored"] == 2
    assert "roc_auc" not in metrics["per_task"]["b"]  # one class only: no AUC, not in the mean
    assert task.figures("dev", metrics)["dev_per_task"] == {
        "a": pytest.approx(a),
        "c": pytest.approx(c),
    }


def test_a_single_task_reports_flat_metrics_and_its_final_line():
    task = BinaryClassification(["p_np"])
    metrics = task.metrics(np.array([[1.0], [0.0], [1.0]]), np.array([[1.0], [-1.0], [0.0]]))
    assert metrics["roc_auc"] == 1.0 and "per_task" not in metrics
    assert task.final_line(metrics) == "Final test ROC AUC: 1.0000"


def test_regression_learns_its_scale_from_training_labels_and_reports_in_their_units():
    task = Regression.from_training_labels(["logS"], np.array([[-2.0], [-4.0], [NAN]]))
    assert task.mean.tolist() == [-3.0] and task.std.tolist() == [1.0]
    targets = np.array([[-1.0], [-3.0], [-5.0]])
    outputs = np.array([[2.0], [0.0], [-1.0]])  # standardised: -1, -3, -4 in the label's units
    metrics = task.metrics(targets, outputs)
    assert metrics["rmse"] == pytest.approx(math.sqrt((0 + 0 + 1) / 3))
    assert metrics["mae"] == pytest.approx(1 / 3) and metrics["r2"] == pytest.approx(1 - 1 / 8)
    assert task.final_line(metrics) == f"Final test RMSE: {metrics['rmse']:.4f}"
    assert (
        task.is_better(0.5, 0.6) and not task.is_better(0.7, 0.6) and task.worst_score == math.inf
    )
    loss = task.loss(torch.tensor([[2.0]]), torch.tensor([[-1.0]]))
    assert loss.item() == pytest.approx(0.0)  # (-1 - -3) / 1 = 2: exact


def test_tasks_round_trip_through_their_saved_description():
    for task in (
        BinaryClassification(["a", "b"]),
        BinaryClassification(["a"], [3.0]),
        Regression(["y"], [1.5], [2.0]),
    ):
        again = task_from_dict(task.to_dict())
        assert type(again) is type(task) and again.to_dict() == task.to_dict()


def test_auto_picks_the_task_from_the_labels():
    assert choose_task_kind("auto", _table([0, 1, 1, 0])) == "classification"
    assert choose_task_kind("auto", _table([0.3, -2.1, 4.0, 1.0])) == "regression"
    assert choose_task_kind("regression", _table([0, 1, 1, 0])) == "regression"


def test_a_binary_column_with_a_typo_is_an_error_not_a_regression():
    labels = [0, 1] * 10 + [2]
    with pytest.raises(
        DataError,
        match=r"t.csv: column 'y' must hold 0 or 1 for classification; 1 cells do not, "
        r"first: row 22: '2'",
    ):
        choose_task_kind("auto", _table(labels))
    with pytest.raises(DataError, match="row 3: '0.5'"):
        choose_task_kind("classification", _table([0, 0.5, 1]))


def test_a_split_without_any_scorable_task_stops_before_training():
    table = _table([[1, 0], [1, 0], [0, 1], [1, 0]], columns=("a", "b"))
    splits = Splits(np.array([2, 3]), np.array([0, 1]), np.array([2, 3]))
    with pytest.raises(DataError, match="t.csv: the dev set .* has no task that can be scored"):
        build_task("classification", table, splits)


def test_balanced_class_weights_come_from_the_training_split_and_even_out_the_classes():
    labels = [
        [1, 0],
        [0, NAN],
        [0, 1],
        [0, 0],
        [1, 1],
        [0, 0],
        [1, 1],
    ]  # the last two rows: dev and test
    table = _table(labels, columns=("rare", "gappy"))
    splits = Splits(np.arange(5), np.array([5, 6]), np.array([5, 6]))
    task = build_task("classification", table, splits, class_weight="balanced")
    assert task.positive_weight == [
        3 / 2,
        2 / 2,
    ]  # training negatives per positive; the gap counts for neither
    assert task_from_dict(task.to_dict()).positive_weight == task.positive_weight
    targets = torch.tensor(labels[:5], dtype=torch.float32)
    outputs = torch.zeros(
        5, 2
    )  # an undecided model: the weighted positives now weigh as much as the negatives
    cells = task.cell_losses(outputs, torch.nan_to_num(targets))
    for column in (0, 1):
        positives, negatives = (
            cells[:, column][targets[:, column] == label].sum() for label in (1, 0)
        )
        assert positives.item() == pytest.approx(negatives.item())
    assert (
        build_task("classification", table, splits).positive_weight is None
    )  # the default: plain BCE


def test_class_weights_are_for_classification_only():
    table = _table([0.3, -2.1, 4.0, 1.0])
    splits = Splits(np.array([0, 1]), np.array([2, 3]), np.array([2, 3]))
    with pytest.raises(
        DataError, match="t.csv: --class-weight balanced weighs classes; this is a regression task"
    ):
        build_task("regression", table, splits, class_weight="balanced")


def test_saved_constants_follow_the_outputs_dtype_from_call_to_call():
    # built once per dtype and device: a float32 step, float64 scoring, then float32 again
    outputs, targets = torch.tensor([[0.3], [-1.2]]), torch.tensor([[1.0], [0.0]])
    for task in (BinaryClassification(["y"], [3.0]), Regression(["y"], [1.5], [2.0])):
        first = task.cell_losses(outputs, targets)
        wide = task.cell_losses(outputs.double(), targets.double())
        again = task.cell_losses(outputs, targets)
        assert first.dtype == again.dtype == torch.float32 and wide.dtype == torch.float64
        assert torch.equal(first, again) and torch.allclose(wide.float(), first)
    weighted = BinaryClassification(["y"], [3.0]).cell_losses(outputs, targets)
    assert weighted[0, 0].item() == pytest.approx(
        3 * math.log1p(math.exp(-0.3))
    )  # the positive, weighted 3


def test_multiclass_loss_is_cross_entropy_and_its_score_the_macro_one_vs_rest_roc_auc():
    rng = np.random.default_rng(0)
    labels = rng.choice([3.0, 5.0, 7.0], size=60)  # classes need not be 0..K-1
    outputs = rng.normal(size=(60, 3)) + 2 * (labels[:, None] == np.array([3, 5, 7]))
    task = MulticlassClassification(["y"], [3, 5, 7])
    assert task.output_columns == ["y_3", "y_5", "y_7"]
    targets = np.append(labels, NAN)[:, None]  # a missing label: masked out
    outputs = np.vstack([outputs, [100.0, -100.0, 0.0]])
    index = np.searchsorted([3, 5, 7], labels)
    expected_loss = torch.nn.functional.cross_entropy(
        torch.as_tensor(outputs[:60]), torch.as_tensor(index), reduction="sum"
    )
    loss = task.loss(torch.as_tensor(outputs), torch.as_tensor(targets))
    assert loss.item() == pytest.approx(expected_loss.item())
    metrics = task.metrics(targets, outputs)
    probabilities = task.predictions(outputs[:60])
    assert np.allclose(probabilities.sum(axis=1), 1.0)
    assert metrics["roc_auc"] == pytest.approx(
        roc_auc_score(index, probabilities, multi_class="ovr", average="macro")
    )
    assert metrics["per_class"]["y_5"] == pytest.approx(
        roc_auc_score(index == 1, probabilities[:, 1])
    )
    assert metrics["loss"] == pytest.approx(expected_loss.item() / 60)
    assert task.final_line(metrics) == f"Final test ROC AUC: {metrics['roc_auc']:.4f}"
    saved = task_from_dict(task.to_dict())
    assert isinstance(saved, MulticlassClassification) and saved.classes == [3.0, 5.0, 7.0]


def test_a_class_missing_from_a_split_is_left_out_of_the_mean_not_scored_as_chance():
    task = MulticlassClassification(["y"], [0, 1, 2])
    targets = np.array([[0.0], [1.0], [0.0], [1.0]])
    outputs = np.array([[2.0, 0, 0], [0, 2.0, 0], [1.0, 0, 0], [0, 1.0, 0]])
    metrics = task.metrics(targets, outputs)
    assert metrics["per_class"]["y_2"] is None and metrics["roc_auc"] == 1.0
    with pytest.raises(Exception, match="two classes or more"):
        task.metrics(np.zeros((3, 1)), np.zeros((3, 3)))


def test_auto_picks_multiclass_for_3_to_20_whole_numbers_in_one_column():
    assert choose_task_kind("auto", _table([0, 1, 2] * 5)) == "multiclass"
    assert choose_task_kind("auto", _table(list(range(20)) * 2)) == "multiclass"
    assert choose_task_kind("auto", _table(list(range(21)) * 2)) == "regression"
    assert choose_task_kind("auto", _table([0.5, 1, 2] * 5)) == "regression"
    with pytest.raises(DataError, match="two classes: write them as 0 and 1"):
        choose_task_kind("auto", _table([1, 2] * 5))
    with pytest.raises(DataError, match="classes in several columns"):
        choose_task_kind("auto", _table([[0, 1], [1, 2], [2, 0]] * 3, columns=("a", "b")))
    with pytest.raises(DataError, match="must hold two or more whole-number classes"):
        choose_task_kind("multiclass", _table([0.5, 1.5, 2] * 3))
    assert choose_task_kind("regression", _table([0, 1, 2] * 5)) == "regression"
    splits = Splits(np.arange(9), np.arange(9, 12), np.arange(12, 15))
    task = build_task("multiclass", _table([0, 1, 2] * 5), splits)
    assert task.classes == [0.0, 1.0, 2.0]
