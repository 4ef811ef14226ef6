"""The end of a run, written by rank 0 alone: the model folder,
`metrics.json`, figures as PNG files, and TensorBoard's test figures and
hparams. No collectives here."""

import json
from pathlib import Path

import numpy as np

from .checkpoint import save_model_dir
from .files import atomic_write, atomic_write_json
from .html_report import write_html_report
from .logs import log

# What a run measures rather than chooses: TensorBoard shows them as metrics beside the scores.
MEASURED = ("train_samples_per_second", "wall_seconds")


def metrics_record(task, state, test_metrics, run):
    """metrics.json's content: `test_<score>`, `best_dev_<score>` and the run's figures."""
    score = task.score_name
    return {
        f"test_{score}": test_metrics[score],
        "test_loss": test_metrics["loss"],
        f"best_dev_{score}": state.best_score,
        "best_epoch": state.best_epoch,
        "epochs_completed": state.epoch,
        **run,
        "task": task.kind,
        "label_columns": task.columns,
        "test_metrics": test_metrics,
        "history": state.history,
    }


def write_report(output_dir, *, writer, task, state, test, run, descriptions):
    """`test` is (targets, outputs) of the best weights on the test split;
    `run` the run's own figures (world size, batch, wall seconds...), to which
    the training speed is added from the history's `molecules` and `seconds`;
    `descriptions` the JSON files saved beside the model (task.json, from `task`, among
    them)."""
    output = Path(output_dir)
    targets, outputs = test
    # every epoch's molecules over every epoch's seconds, earlier attempts' too
    trained = [(row["molecules"], row["seconds"]) for row in state.history if "seconds" in row]
    molecules, seconds = (sum(column) for column in zip(*trained)) if trained else (0, 0.0)
    run = {**run, "train_samples_per_second": molecules / max(seconds, 1e-9)}
    test_metrics = task.metrics(targets, outputs)
    descriptions = {"task": task.to_dict(), **descriptions}
    save_model_dir(output, state.best_state, descriptions)
    metrics = metrics_record(task, state, test_metrics, run)
    atomic_write_json(metrics, output / "metrics.json")
    _figures(output, writer, task, state, targets, task.predictions(outputs))
    write_html_report(output, metrics, descriptions.get("hparams", {}))  # needs the PNGs above
    writer.add_scalar("Loss/test_at_best_epoch", test_metrics["loss"], state.best_epoch)
    writer.add_scalar(
        f"{task.score_tag}/test_at_best_epoch", test_metrics[task.score_name], state.best_epoch
    )
    measured = {k: v for k, v in run.items() if k in MEASURED}
    final = {
        f"hparam/test_{task.score_name}": test_metrics[task.score_name],
        f"hparam/best_dev_{task.score_name}": state.best_score,
        **{f"hparam/{k}": v for k, v in measured.items()},
    }
    write_hparams(
        writer,
        {**descriptions.get("hparams", {}), **{k: v for k, v in run.items() if k not in measured}},
        final,
    )
    writer.close()
    log.info(
        "metrics: %s",
        json.dumps({k: v for k, v in metrics.items() if k not in ("history", "test_metrics")}),
    )
    return test_metrics


def write_hparams(writer, hparams, metrics):
    """The run's flags and final metrics in the run's own event file, beside
    its curves (as Lightning's logger does; `add_hparams` would start another
    run in a subfolder, which TensorBoard lists apart from the curves)."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    flat = _flat(hparams)
    for summary in hparams_summary(flat, metrics):
        writer.file_writer.add_summary(summary)
    for name, value in metrics.items():
        writer.add_scalar(name, value)


def _flat(hparams, prefix=""):
    """TensorBoard takes numbers, strings and booleans: nested dicts become
    `model.d_model`, lists `a,b`, anything else its text."""
    flat = {}
    for key, value in hparams.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = (
                value
                if isinstance(value, (int, float, str, bool))
                else (",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value))
            )
    return flat


def _figures(output, writer, task, state, targets, predictions):
    from .plots import parity_figure, roc_figure, save_figure, training_curves_figure

    if task.kind in ("classification", "multiclass"):
        if task.kind == "classification" and len(task.columns) == 1:
            present = ~np.isnan(targets[:, 0])
            writer.add_pr_curve(
                "PR/test", targets[present, 0], predictions[present, 0], state.best_epoch
            )
        noun = "tasks"
        if task.kind == "multiclass":  # a curve per class: it against the others
            targets, noun = task.one_vs_rest(targets), "classes"
        figure, name, tag = (
            roc_figure(targets, predictions, task.output_columns, noun),
            "roc_curve.png",
            "ROC/test",
        )
    else:
        figure, name, tag = (
            parity_figure(targets, predictions, task.columns),
            "parity.png",
            "Parity/test",
        )
    atomic_write(output / name, lambda f: figure.savefig(f, format="png", dpi=110))
    writer.add_figure(tag, figure, state.best_epoch)  # also closes the figure
    save_figure(
        training_curves_figure(state.history, state.best_epoch, task.score_name, task.score_title),
        output / "training_curves.png",
    )
