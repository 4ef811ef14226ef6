"""Reading and validating a CSV of molecules: one SMILES column, one or more
numeric label columns. Every problem names the file, the column and the rows
(numbered as a text editor shows them: the header is row 1)."""

from contextlib import contextmanager
import csv
from dataclasses import dataclass, replace
from functools import partial
import gzip
import time
from types import SimpleNamespace
import warnings

import numpy as np
import pandas as pd

from ..ddp.errors import DataError
from ..ddp.logs import log
from .cached import cached_strings
from .chem import canonical_smiles
from .chunked import joined

SMILES_FORMS = ("canonical", "raw")
# Characters: longer SMILES are dropped before training (see --max-smiles-length).
MAX_SMILES_LENGTH = 2000


@dataclass
class MoleculeTable:
    smiles: list
    labels: np.ndarray  # float64 [molecules, label columns]; NaN where a cell is empty
    label_columns: list
    rows: np.ndarray  # each molecule's row in the file
    warnings: list
    source: str = ""  # the file, for messages


@contextmanager
def timed(what):
    """Logs "start-up: <what> in <seconds> s" at INFO when the block ends without an error,
    so that a big file's minutes before the first epoch can be accounted for in every rank's
    log. The yielded object's `what` can be extended with what only the block learns."""
    phase = SimpleNamespace(what=what)
    start = time.perf_counter()
    yield phase
    log.info("start-up: %s in %.2f s", phase.what, time.perf_counter() - start)


def first_rows(rows, limit=5):
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" (and {len(rows) - limit} more)" if len(rows) > limit else "")


def _looks_binary(path):
    """A NUL byte at the start: not text (a gzip file is read as the text it holds)."""
    try:
        with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as f:
            return b"\0" in f.read(4096)
    except gzip.BadGzipFile:
        return True
    except OSError:
        return False  # let pandas say why it cannot be read


def read_frame(path):
    """The CSV as strings (empty cells as NaN), or a DataError saying why not."""
    if _looks_binary(path):
        raise DataError(f"{path}: binary data, not a CSV text file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            # index_col=False: rows with one field more than the header (a trailing comma) would
            # otherwise make the first column the index and shift every column left by one
            return pd.read_csv(
                path, dtype=str, keep_default_na=False, na_values=[""], index_col=False
            )
    except pd.errors.ParserWarning:
        raise DataError(f"{path}: {_longer_rows(path)}") from None
    except FileNotFoundError:
        raise DataError(
            f"{path}: no such file (BBBP ships in dataset/; python dataset/place_data.py "
            "HIV|SIDER|ESOL|Lipophilicity downloads the others)"
        ) from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a CSV file") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty") from None
    except (UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise DataError(f"{path}: not a readable CSV file ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def _longer_rows(path):
    """Which rows hold more fields than the header: values pandas would drop without a word."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8", errors="replace") as f:
        lines = csv.reader(f)
        width = len(next(lines))
        longer = [lines.line_num for row in lines if len(row) > width]
    return (
        f"{len(longer)} rows hold more fields than the header's {width}, "
        f"first rows {first_rows(longer)}"
    )


def resolve_columns(requested, columns, path):
    """Column names from flags: each entry is one name or several joined by
    commas. Some real names hold commas themselves (SIDER's "Injury,_poisoning_..."),
    so the pieces are re-joined greedily, longest known name first."""
    resolved = []
    for entry in requested:
        pieces = entry.split(",")
        while pieces:
            for end in range(len(pieces), 0, -1):
                name = ",".join(pieces[:end]).strip()
                if name in columns:
                    resolved.append(name)
                    pieces = pieces[end:]
                    break
            else:
                raise DataError(
                    f"{path}: no column {pieces[0].strip()!r}; the columns are {list(columns)}"
                )
    if len(set(resolved)) < len(resolved):
        raise DataError(f"{path}: a label column is named twice in {resolved}")
    return resolved


def _parse_numbers(path, frame, columns, rows):
    if not columns:  # a corpus without labels (pretraining)
        return np.zeros((len(frame), 0))
    values = frame[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    given = frame[columns].notna().to_numpy()
    _refuse_cells(path, frame, columns, rows, given & ~np.isfinite(values), "must hold numbers")
    # training runs in float32: a larger label would become infinity, and the loss with it
    too_large = given & (np.abs(np.nan_to_num(values)) > np.finfo(np.float32).max)
    _refuse_cells(path, frame, columns, rows, too_large, "must hold numbers that fit float32")
    return values


def _refuse_cells(path, frame, columns, rows, bad, rule):
    if not bad.any():
        return
    cells = [(rows[r], columns[c], frame[columns].iat[r, c]) for r, c in zip(*np.nonzero(bad))]
    shown = "; ".join(f"row {row}: {value!r}" for row, _, value in cells[:5])
    raise DataError(
        f"{path}: column {cells[0][1]!r} {rule}; {int(bad.sum())} cells do not, first: {shown}"
    )


def read_molecule_csv(
    path,
    smiles_column="smiles",
    label_columns=("p_np",),
    strict=False,
    parse=False,
    smiles_form="raw",
    cache=False,
):
    """Validated SMILES and numeric labels. A row with no label at all is
    dropped with a warning (an error when `strict`); with several label
    columns, single empty cells stay as NaN (a missing label, masked later).

    smiles_form "canonical" rewrites every SMILES as RDKit's canonical SMILES
    (one string per molecule, whatever style its source wrote it in); "raw"
    keeps the file's. With "canonical" or `parse`, rows RDKit cannot parse are
    dropped with a warning naming them (an error when `strict`). With `cache`, RDKit's
    canonical SMILES come from the cache after the first run (see cached_strings)."""
    if smiles_form not in SMILES_FORMS:
        raise DataError(
            f"unknown SMILES form {smiles_form!r}: choose one of {', '.join(SMILES_FORMS)}"
        )
    with timed(f"read {path}") as phase:
        frame = read_frame(path)
        table = validate_frame(frame, path, smiles_column, label_columns, strict)
        phase.what += f" ({len(frame):,} rows)"
    if parse or smiles_form == "canonical":
        table = _parsed(table, strict, smiles_form == "canonical", cache)
    # after canonicalising: one molecule written in two styles is one molecule
    return replace(
        table, warnings=table.warnings + repeat_warnings(path, table.smiles, table.labels)
    )


def _smiles_column(name, columns, path):
    """`name`, or the one column spelled like it in other letter case (MOSES's "SMILES")."""
    if name in columns:
        return name
    alike = [c for c in columns if c.lower() == name.lower()]
    if len(alike) == 1:
        return alike[0]
    raise DataError(f"{path}: no column {name!r}; the columns are {list(columns)}")


def validate_frame(frame, path, smiles_column, label_columns, strict):
    """The frame's molecules and labels, checked, as a MoleculeTable."""
    smiles_column = _smiles_column(smiles_column, frame.columns, path)
    columns = resolve_columns(list(label_columns), frame.columns, path)
    rows = np.arange(len(frame)) + 2
    warnings = []
    # no label columns (a pretraining corpus): no row lacks a label
    unlabelled = frame[columns].isna().all(axis=1).to_numpy() & bool(columns)
    if unlabelled.any():
        names = " or ".join(map(repr, columns))
        message = (
            f"{path}: {int(unlabelled.sum())} rows have no {names} label, "
            f"first rows {first_rows(rows[unlabelled])}"
        )
        if strict:
            raise DataError(message)
        warnings.append(message + "; they are dropped")
        frame, rows = frame[~unlabelled], rows[~unlabelled]
    empty = frame[smiles_column].fillna("").str.strip().eq("").to_numpy()
    if empty.any():
        raise DataError(
            f"{path}: empty SMILES in column {smiles_column!r} at rows {first_rows(rows[empty])}"
        )
    if len(frame) == 0:
        raise DataError(f"{path}: no molecules (header only?)")
    smiles = frame[smiles_column].str.strip().tolist()
    labels = _parse_numbers(path, frame, columns, rows)
    return MoleculeTable(smiles, labels, columns, rows, warnings, str(path))


def _parsed(table, strict, canonical, cache):
    what = "canonical SMILES" if canonical else "parsed SMILES"
    with timed(f"{what} for {len(table.smiles):,} molecules"):
        write = partial(joined, canonical_smiles, description=what)
        # the canonical form also says which rows parse: one cached computation for both
        written = cached_strings("canonical SMILES", write, table.smiles, cache)
    bad = [i for i, s in enumerate(written) if s is None]
    if bad and strict:
        raise DataError(
            f"{table.source}: {len(bad)} rows have SMILES that RDKit cannot parse: "
            f"rows {first_rows(table.rows[bad], 11)}"
        )
    if canonical:
        table = replace(
            table, smiles=[given if s is None else s for given, s in zip(table.smiles, written)]
        )
    return drop_rows(table, bad, "have SMILES that RDKit cannot parse")


def repeat_warnings(path, smiles, labels):
    """Molecules given more than once: a random split can put copies in train and test."""
    counts = pd.Series(smiles).value_counts()
    repeated = counts[counts > 1]
    extra = int(repeated.sum() - len(repeated))
    warnings = []
    if len(repeated):
        warnings.append(
            f"{path}: {len(repeated)} SMILES appear more than once ({extra} extra rows); a random "
            "or stratified split can put copies of one molecule in train and test"
        )
    if labels.shape[1] == 1:
        by_smiles = pd.Series(labels[:, 0]).groupby(pd.Series(smiles)).nunique()
        conflicting = int((by_smiles > 1).sum())
        warnings += (
            [f"{path}: {conflicting} SMILES appear with different labels"] if conflicting else []
        )
    return warnings


def drop_long_smiles(table, max_length, strict=False):
    """The table without SMILES longer than `max_length` characters, named in a
    warning (an error when `strict`): a batch is padded to its longest member."""
    long = [i for i, smiles in enumerate(table.smiles) if len(smiles) > max_length]
    reason = f"have SMILES longer than {max_length} characters (--max-smiles-length)"
    if long and strict:
        raise DataError(
            f"{table.source}: {len(long)} rows {reason}: rows {first_rows(table.rows[long], 11)}"
        )
    return drop_rows(table, long, reason)


def drop_rows(table, positions, reason):
    """The table without the molecules at `positions`, with a warning naming their rows."""
    if not len(positions):
        return table
    keep = np.setdiff1d(np.arange(len(table.smiles)), positions)
    rows = first_rows(table.rows[positions], 11)
    warning = f"{table.source}: {len(positions)} rows {reason}, dropped: rows {rows}"
    return MoleculeTable(
        [table.smiles[i] for i in keep],
        table.labels[keep],
        table.label_columns,
        table.rows[keep],
        table.warnings + [warning],
        table.source,
    )
