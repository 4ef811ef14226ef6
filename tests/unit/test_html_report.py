"""report.html: one self-contained page from metrics.json's record and the run's figures."""

import base64
import html
import re
import struct
import zlib

from partorch.ddp.html_report import write_html_report


def _png(width, height):
    """A tiny valid PNG (grey pixels): no figure library needed."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    pixels = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(pixels))
        + chunk(b"IEND", b"")
    )


def _record():
    per_task = {
        "p_np": {"roc_auc": 0.8125, "molecules": 30},
        "<b>": {"roc_auc": 0.6875, "molecules": 28, "per_class": {"active": 0.71, "x&y": 0.62}},
        "unscored": {"molecules": 3},
    }
    return {
        "test_roc_auc": 0.75,
        "test_loss": 0.5,
        "best_dev_roc_auc": 0.8,
        "best_epoch": 2,
        "epochs_completed": 3,
        "world_size": 2,
        "global_batch_size": 32,
        "seed": 1729,
        "wall_seconds": 12.5,
        "train_samples_per_second": 431.25,
        "task": "classification",
        "label_columns": list(per_task),
        "test_metrics": {"loss": 0.5, "roc_auc": 0.75, "tasks_scored": 2, "per_task": per_task},
        "history": [
            {"epoch": e, "train_loss": 0.9 / e, "dev_loss": 0.7, "dev_roc_auc": 0.7, "lr": 1e-5}
            for e in (1, 2, 3)
        ],
    }


def test_the_report_embeds_the_figures_and_escapes_every_value(tmp_path):
    figures = {"training_curves.png": _png(3, 2), "roc_curve.png": _png(2, 2)}
    for name, data in figures.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "config.yaml").write_text("model:\n  d_model: <16>\n")
    config = {"model": {"d_model": 16}, "smiles_form": "canonical", "split_sizes": [0.7, 0.3]}
    path = write_html_report(tmp_path, _record(), config)
    assert path == tmp_path / "report.html"
    page = path.read_text()
    assert html.escape(tmp_path.as_posix()) in page.split("</title>")[0]  # names the folder
    embedded = dict(re.findall(r'alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page))
    assert {name: base64.b64decode(data) for name, data in embedded.items()} == figures
    # the summary, the per-task table (a missing score shown as such), the per-class table
    for text in ("0.7500", "0.8000", "1729", "431.2500", "0.8125", "0.6875", "0.7100", "0.6200"):
        assert f">{text}</td>" in page, text
    assert "&lt;b&gt;" in page and "<b>" not in page and "x&amp;y" in page
    assert re.search(r"<th>unscored</th><td>–</td>", page)
    # one row per epoch, the learning rate readable
    assert page.count('<td class="n">1e-05</td>') == 3
    assert "<th>model.d_model</th>" in page and "0.7, 0.3" in page
    assert "d_model: &lt;16&gt;" in page  # config.yaml's text, escaped


def test_a_single_column_has_its_figures_at_the_top_level(tmp_path):
    record = {
        "test_rmse": 0.9,
        "best_dev_rmse": 1.1,
        "best_epoch": 1,
        "label_columns": ["logSolubility"],
        "test_metrics": {"loss": 0.4, "rmse": 0.9, "mae": 0.7, "molecules": 11, "r2": 0.55},
        "history": [],
    }
    page = write_html_report(tmp_path, record, {}).read_text()
    row = re.search(r"<tr><th>logSolubility</th>(.*?)</tr>", page).group(1)
    assert re.findall(r">([^<]+)</td>", row) == ["0.9000", "0.7000", "11", "0.5500"]
    assert "<img" not in page and "Config" not in page  # no figures, no config: no sections
