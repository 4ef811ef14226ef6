"""The end of a run, written by rank 0 alone: the model folder,
`metrics.json`, figures as PNG files, and TensorBoard's test figures and
hparams. No collectives here."""
import json
from pathlib import Path

import numpy as np

from .checkpoint import atomic_write_json, save_model_dir
from .logs import log


def metrics_record(task, state, test_metrics, run):
    """metrics.json's content: `test_<score>`, `best_dev_<score>` and the run's figures."""
    score = task.score_name
    return {f"test_{score}": test_metrics[score], "test_loss": test_metrics["loss"],
            f"best_dev_{score}": state.best_score, "best_epoch": state.best_epoch,
            "epochs_completed": state.epoch, **run, "task": task.kind, "label_columns": task.columns,
            "test_metrics": test_metrics, "history": state.history}


def write_report(output_dir, *, writer, task, state, test, run, descriptions):
    """`test` is (targets, outputs) of the best weights on the test split;
    `run` the run's own figures (world size, batch, speed...);
    `descriptions` the JSON files saved beside the model."""
    output = Path(output_dir)
    targets, outputs = test
    test_metrics = task.metrics(targets, outputs)
    save_model_dir(output, state.best_state, descriptions)
    metrics = metrics_record(task, state, test_metrics, run)
    atomic_write_json(metrics, output / "metrics.json")
    _figures(output, writer, task, state, targets, task.predictions(outputs))
    writer.add_scalar("Loss/test_at_best_epoch", test_metrics["loss"], state.best_epoch)
    writer.add_scalar(f"{task.score_tag}/test_at_best_epoch", test_metrics[task.score_name], state.best_epoch)
    flat = {k: v if isinstance(v, (int, float, str, bool)) else str(v)
            for k, v in {**descriptions.get("hparams", {}), **run}.items()}
    writer.add_hparams(flat, {f"hparam/test_{task.score_name}": test_metrics[task.score_name],
                              f"hparam/best_dev_{task.score_name}": state.best_score}, run_name="hparams")
    writer.close()
    log.info("metrics: %s", json.dumps({k: v for k, v in metrics.items() if k not in ("history", "test_metrics")}))
    return test_metrics


def _figures(output, writer, task, state, targets, predictions):
    from .plots import roc_figure, parity_figure, save_figure, training_curves_figure
    if task.kind == "classification":
        if len(task.columns) == 1:
            present = ~np.isnan(targets[:, 0])
            writer.add_pr_curve("PR/test", targets[present, 0], predictions[present, 0], state.best_epoch)
        figure, name, tag = roc_figure(targets, predictions, task.columns), "roc_curve.png", "ROC/test"
    else:
        figure, name, tag = parity_figure(targets, predictions, task.columns), "parity.png", "Parity/test"
    figure.savefig(output / name, dpi=110)
    writer.add_figure(tag, figure, state.best_epoch)  # also closes the figure
    save_figure(training_curves_figure(state.history, state.best_epoch, task.score_name, task.score_title),
                output / "training_curves.png")
