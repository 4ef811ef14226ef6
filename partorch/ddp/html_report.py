"""`report.html`: a finished run on one page for people without TensorBoard: the
summary, the test figures per label column, the epochs, the figures and the config.
One self-contained file (the PNG figures inside it as data URIs), so that it can
be mailed or opened anywhere. It reads metrics.json's record and the run folder's
files only: no torch, no task classes, nothing distributed."""

import base64
import html
import math
from numbers import Number
from pathlib import Path

from .files import atomic_write_text

REPORT_FILE = "report.html"
# Whichever of them the run wrote: the curves, then the ROC curve or the parity plot.
FIGURES = ("training_curves.png", "roc_curve.png", "parity.png")
CONFIG_FILE = "config.yaml"
# The summary's figures first, in this order; any other top-level figure follows them.
SUMMARY_KEYS = (
    "epochs_completed",
    "world_size",
    "global_batch_size",
    "seed",
    "wall_seconds",
    "train_samples_per_second",
)
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:70em}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:0.2em 0.6em;text-align:left}"
    "td.n{text-align:right;font-family:monospace}"
    "img{max-width:100%}pre{background:#f4f4f4;padding:1em;overflow-x:auto}"
)
MISSING = "–"  # a column without this figure (a task that could not be scored)


def write_html_report(output_dir, metrics, config, figures=FIGURES):
    """Write OUTPUT_DIR/report.html from `metrics` (metrics.json's record), `config`
    (the run's hparams) and the `figures` (PNG file names) that exist in the folder."""
    output = Path(output_dir)
    sections = [
        _summary(metrics),
        _per_task(metrics),
        _per_epoch(metrics),
        _figures(output, figures),
        _config(output, config),
    ]
    path = output / REPORT_FILE
    atomic_write_text(_page(f"partorch run {output.as_posix()}", sections), path)
    return path


def _page(title, sections):
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_text(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{_text(title)}</h1>\n" + "\n".join(s for s in sections if s) + "\n</body>\n</html>\n"
    )


def _text(value):
    return html.escape(str(value))


def _number_text(value):
    """Four decimals, as the final log line prints the score; tiny values (a learning
    rate) in scientific notation rather than as 0.0000."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if math.isfinite(value) and value != 0 and abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.4f}"


def _cell(value):
    if isinstance(value, Number):
        return f'<td class="n">{_text(_number_text(value))}</td>'
    if isinstance(value, (list, tuple)):
        return f"<td>{_text(', '.join(map(str, value)))}</td>"
    return f"<td>{_text(value)}</td>"


def _two_columns(mapping, headers=("name", "value")):
    rows = "".join(f"<tr><th>{_text(k)}</th>{_cell(v)}</tr>\n" for k, v in mapping.items())
    head = "".join(f"<th>{_text(h)}</th>" for h in headers)
    return f"<table>\n<tr>{head}</tr>\n{rows}</table>"


def _rows_table(rows, first="column"):
    """`rows`: (name, dict) pairs; one table row each, one column per inner key that
    holds a figure (nested dicts are shown apart, see `_nested_tables`)."""
    rows = list(rows)  # read twice: the columns, then the rows
    keys = list(dict.fromkeys(k for _, row in rows for k, v in row.items() if _scalar(v)))
    head = "".join(f"<th>{_text(k)}</th>" for k in [first, *keys])
    body = "".join(
        f"<tr><th>{_text(name)}</th>"
        + "".join(_cell(row[k]) if k in row else f"<td>{MISSING}</td>" for k in keys)
        + "</tr>\n"
        for name, row in rows
    )
    return f"<table>\n<tr>{head}</tr>\n{body}</table>"


def _scalar(value):
    return not isinstance(value, dict)


def _mapping_table(mapping, first="name"):
    """Any dict a future task may add (per-class ROC AUCs...): rows of figures when its
    values are dicts, else two columns; a table either way, never an error."""
    if mapping and all(isinstance(v, dict) for v in mapping.values()):
        return _rows_table(mapping.items(), first) + _nested_tables(mapping)
    flat = {k: v for k, v in mapping.items() if _scalar(v)}
    nested = {k: v for k, v in mapping.items() if not _scalar(v)}
    return (_two_columns(flat) if flat else "") + "".join(
        f"<h3>{_text(k)}</h3>\n{_mapping_table(v)}" for k, v in nested.items()
    )


def _nested_tables(rows):
    """Each row's nested dicts, one small table each, titled `row: key`."""
    return "".join(
        f"<h3>{_text(name)}: {_text(key)}</h3>\n{_mapping_table(value)}"
        for name, row in rows.items()
        for key, value in row.items()
        if isinstance(value, dict)
    )


def _score_name(metrics):
    """The record names its score only in its keys: `best_dev_<score>`."""
    return next((k[len("best_dev_") :] for k in metrics if k.startswith("best_dev_")), None)


def _summary(metrics):
    score = _score_name(metrics)
    shown = {}
    if score is not None:
        shown[f"test {score}"] = metrics.get(f"test_{score}", MISSING)
        shown[f"best dev {score}"] = metrics.get(f"best_dev_{score}", MISSING)
        shown["best epoch"] = metrics.get("best_epoch", MISSING)
    named = [k for k in SUMMARY_KEYS if k in metrics]
    shown.update({k.replace("_", " "): metrics[k] for k in named})
    done = {f"test_{score}", f"best_dev_{score}", "best_epoch", *named, "history"}
    # the run's other figures (task, test loss, patience...): shown rather than lost
    shown.update(
        {k.replace("_", " "): v for k, v in metrics.items() if k not in done and _plain(v)}
    )
    return f"<h2>Summary</h2>\n{_two_columns(shown)}"


def _plain(value):
    return not isinstance(value, dict) and not (
        isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)
    )


def _per_task(metrics):
    """Test figures per label column: at the top level of test_metrics for one
    column, under "per_task" for several; other nested dicts follow as tables."""
    test = metrics.get("test_metrics") or {}
    columns = metrics.get("label_columns") or ["test"]
    if "per_task" in test:
        rows = test["per_task"]
        extra = {k: v for k, v in test.items() if isinstance(v, dict) and k != "per_task"}
    else:
        rows = {columns[0]: {k: v for k, v in test.items() if k != "loss"}}
        extra = {}
    if not rows:
        return ""
    tables = _rows_table(rows.items()) + _nested_tables(rows)
    tables += "".join(f"<h3>{_text(k)}</h3>\n{_mapping_table(v)}" for k, v in extra.items())
    return f"<h2>Test figures per label column</h2>\n{tables}"


def _per_epoch(metrics):
    history = metrics.get("history") or []
    score = _score_name(metrics)
    wanted = ["train_loss", "dev_loss", f"dev_{score}", "test_loss", f"test_{score}"]
    wanted += ["seconds", "lr"]
    keys = [k for k in wanted if any(k in row for row in history)]
    if not history:
        return ""
    # a list, not a dict by epoch: no row is lost should a resumed run repeat an epoch
    rows = [
        (row.get("epoch", i + 1), {k: row[k] for k in keys if k in row})
        for i, row in enumerate(history)
    ]
    return f"<h2>Epochs</h2>\n{_rows_table(rows, first='epoch')}"


def _figures(output, names):
    shown = [name for name in names if (output / name).is_file()]
    return (
        "<h2>Figures</h2>\n" + "\n".join(_figure(output / name) for name in shown) if shown else ""
    )


def _figure(path):
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{_text(path.name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_text(path.name)}</figcaption></figure>"
    )


def _flattened(config, prefix=""):
    """Nested dicts as `model.d_model`: one row per setting."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flattened(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _config(output, config):
    parts = ["<h2>Config</h2>"]
    yaml_file = output / CONFIG_FILE
    if yaml_file.is_file():  # every flag's value, as --config reads it back
        parts.append(f"<h3>{CONFIG_FILE}</h3>\n<pre>{_text(yaml_file.read_text())}</pre>")
    if config:
        parts.append(_two_columns(_flattened(config), headers=("setting", "value")))
    return "\n".join(parts) if len(parts) > 1 else ""
