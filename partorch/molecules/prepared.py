"""A corpus prepared once: a CSV's molecules checked, canonicalised and tokenized into flat
arrays that every rank memory-maps (nanoGPT's train.bin), so that start-up time and memory
per rank stop growing with the corpus, and a torchrun restart reads nothing again.

    DIR/tokens.bin   every molecule's token ids, concatenated (uint8; uint16 past 256 tokens)
    DIR/offsets.npy  int64 [molecules + 1]: molecule i is tokens[offsets[i]:offsets[i + 1]]
    DIR/labels.npy   float32 [molecules, label columns], NaN where a cell is empty
    DIR/rows.npy     int64 [molecules]: each molecule's row in the source (the header is row 1)
    DIR/descriptors.npy  float32 [molecules, descriptors], with --descriptors: RDKit's 2D
                     descriptors of each molecule (NaN where one fails), to pretrain onto
    DIR/meta.json    the source's size and SHA-256, the options, the vocabulary, the counts,
                     the rows skipped and why; written last: a folder without it is unfinished

A folder is built beside its final place and renamed into it, so a reader sees a whole corpus
or none. `ensure_prepared` reuses a folder whose source checksum and options match, and
rebuilds it when either changed; one process per node builds, the others wait for it.
"""

from dataclasses import asdict, dataclass, replace
import hashlib
import json
import os
from pathlib import Path
import shutil
import time
import uuid

import numpy as np
import torch
from torch.utils.data import Dataset

from ..ddp.distributed import available_cores, digest
from ..ddp.errors import DataError
from ..ddp.files import atomic_write_json, cache_root, node_lock
from ..ddp.logs import log
from .chem import canonical_of, descriptors_of, parsed_molecules
from .chunked import in_chunks
from .datasets import collate_token_ids
from .table import (
    MAX_SMILES_LENGTH,
    drop_long_smiles,
    drop_rows,
    read_frame,
    repeat_warnings,
    timed,
    validate_frame,
)
from .tokenizer import UNK, SmilesTokenizer, split_smiles, tokenizer_from_dict

FORMAT = "partorch-prepared-1"
META = "meta.json"
CHUNK = 5_000  # molecules per task sent to a pool worker: a corpus may hold millions
VOCABULARY_MODES = ("build", "fixed", "extend")


@dataclass(frozen=True)
class PrepareOptions:
    """What a prepared corpus depends on besides its source; a change means a rebuild.
    vocabulary: "build" (sorted tokens of this corpus), or, from `base_tokens` (a
    pretrained encoder's), "fixed" (tokens it lacks become <unk>) or "extend" (they are
    appended after its tokens, so its ids keep their meaning). descriptors: names of RDKit
    descriptors to compute for each molecule (chem.DESCRIPTORS), none by default."""

    smiles_column: str = "smiles"
    label_columns: tuple = ()
    smiles_form: str = "canonical"
    max_smiles_length: int = MAX_SMILES_LENGTH
    vocabulary: str = "build"
    base_tokens: tuple = ()
    descriptors: tuple = ()


def source_checksum(path, block=1 << 20):
    sha = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(block):
                sha.update(chunk)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a CSV file") from None
    return sha.hexdigest()


def corpus_key(source, options, checksum=None):
    """What a prepared folder must have been built from to be reused."""
    return digest([FORMAT, checksum or source_checksum(source), asdict(options)])


def is_prepared(folder):
    return (Path(folder) / META).is_file()


def read_meta(folder):
    try:
        return json.loads((Path(folder) / META).read_text())
    except FileNotFoundError:
        raise DataError(
            f"{folder}: not a prepared corpus (no {META}); make one with "
            "scripts/prepare_data.py CSV --output-dir FOLDER"
        ) from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{folder / META}: cannot read ({exc})") from None


def base_vocabulary(folder):
    """The tokens of a prepared folder (meta.json) or of a trained or pretrained model's folder
    (tokenizer.json), in id order: the vocabulary another corpus is prepared in."""
    folder = Path(folder)
    if is_prepared(folder):
        spec = read_meta(folder)["tokenizer"]
    else:
        try:
            spec = json.loads((folder / "tokenizer.json").read_text())
        except (OSError, ValueError):
            raise DataError(
                f"{folder}: neither a prepared corpus (meta.json) nor a model folder "
                "(tokenizer.json)"
            ) from None
    if spec.get("type") != "smiles":
        raise DataError(f"{folder}: its vocabulary is not a SMILES tokenizer's")
    return tuple(tokenizer_from_dict(spec).tokens)


# ------------------------------------------------------------ building
def prepare(source, folder, options=PrepareOptions(), workers=None, checksum=None):
    """Build the prepared corpus of CSV `source` at `folder` (replacing a stale one) and
    return its meta; a folder already built from this source and these options is kept.
    `checksum`: the source's SHA-256, when the caller has read it already."""
    checksum = checksum or source_checksum(source)
    folder, key = Path(folder), corpus_key(source, options, checksum)
    meta = read_meta(folder) if is_prepared(folder) else {}
    if meta.get("key") == key:
        log.info("%s: prepared corpus is up to date", folder)
        return meta
    started = time.perf_counter()
    # a name no other builder uses, even on another node sharing the file system
    building = folder.with_name(f".{folder.name}.building-{uuid.uuid4().hex[:12]}")
    building.mkdir(parents=True)
    try:
        meta = _build(source, building, options, workers or available_cores())
        source_entry = dict(path=str(source), bytes=os.path.getsize(source), sha256=checksum)
        meta.update(source=source_entry, key=key, seconds=round(time.perf_counter() - started, 2))
        atomic_write_json(meta, building / META)
        _move_into_place(building, folder, key)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log.info("start-up: prepared %s in %.1f s", folder, time.perf_counter() - started)
    return read_meta(folder)


def _move_into_place(building, folder, key):
    """Rename the finished folder into place: atomic, so no reader sees half a corpus. A
    stale folder there is moved aside first; one that another builder (another node on a
    shared file system) finished meanwhile from the same source is kept."""
    if folder.exists():
        if is_prepared(folder) and read_meta(folder).get("key") == key:
            return
        stale = folder.with_name(f".{folder.name}.stale-{uuid.uuid4().hex[:12]}")
        folder.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        building.rename(folder)
    except OSError:
        if not (is_prepared(folder) and read_meta(folder).get("key") == key):
            raise


def _build(source, out, options, workers):
    with timed(f"read {source}"):
        frame = read_frame(source)
        table = validate_frame(frame, source, options.smiles_column, options.label_columns, False)
    chunks = _tokenized_chunks(table.smiles, options, workers)
    written = [s for chunk in chunks for s in chunk.smiles]
    table, keep = _kept(table, written, options.max_smiles_length)
    tokenizer = _vocabulary(options, chunks)
    token_ids, lengths, unseen = _merged(chunks, tokenizer, options.base_tokens)
    token_ids, lengths, unseen = token_ids[np.repeat(keep, lengths)], lengths[keep], unseen[keep]
    dtype = np.uint8 if tokenizer.vocab_size <= 256 else np.uint16
    token_ids.astype(dtype).tofile(out / "tokens.bin")
    np.save(out / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    np.save(out / "labels.npy", table.labels.astype(np.float32))
    np.save(out / "rows.npy", table.rows.astype(np.int64))
    descriptors = _descriptor_meta(chunks, keep, options.descriptors, out)
    return dict(
        format=FORMAT,
        options=asdict(options),
        molecules=len(lengths),
        tokens=int(lengths.sum()),
        token_dtype=np.dtype(dtype).name,
        label_columns=list(table.label_columns),
        tokenizer=tokenizer.to_dict(),
        molecules_with_unseen_tokens=int(unseen.sum()),
        **descriptors,
        warnings=table.warnings + repeat_warnings(source, table.smiles, table.labels),
    )


def _descriptor_meta(chunks, keep, names, out):
    """Write the kept molecules' descriptors, if any were asked for; (their names, mean and
    standard deviation over the corpus) for meta.json: what pretraining standardises by."""
    if not names:
        return {}
    values = np.concatenate([chunk.descriptors for chunk in chunks])[keep].astype(np.float32)
    np.save(out / "descriptors.npy", values)
    mean, std = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
    return dict(
        descriptor_columns=list(names),
        descriptor_mean=np.nan_to_num(mean).tolist(),
        descriptor_std=np.where(np.nan_to_num(std) > 0, np.nan_to_num(std), 1.0).tolist(),
    )


def _kept(table, written, max_length):
    """(the table with each SMILES as written, without those RDKit cannot parse or longer
    than `max_length`, with warnings naming their rows; a mask of the molecules kept)."""
    bad = [i for i, s in enumerate(written) if s is None]
    long = [i for i, s in enumerate(written) if s is not None and len(s) > max_length]
    kept = replace(table, smiles=[w or given for w, given in zip(written, table.smiles)])
    kept = drop_rows(kept, bad, "have SMILES that RDKit cannot parse")
    kept = drop_long_smiles(kept, max_length)
    if not kept.smiles:
        raise DataError(f"{table.source}: no molecule left to prepare")
    keep = np.ones(len(written), dtype=bool)
    keep[bad + long] = False
    return kept, keep


@dataclass
class _Chunk:
    """What a pool process returns for a chunk of molecules: each SMILES as written (None
    where RDKit cannot parse it), the chunk's own sorted vocabulary, each molecule's token
    count and its token ids in that vocabulary, concatenated; its descriptors, if asked."""

    smiles: list
    vocabulary: list
    lengths: np.ndarray
    ids: np.ndarray
    descriptors: np.ndarray = None


def _tokenized_chunks(smiles, options, workers):
    """`_tokenized_chunk` over chunks of `smiles`, in order, over a pool of `workers`
    processes for a big corpus."""
    canonical = options.smiles_form == "canonical"
    what = f"{'canonical' if canonical else 'parsed'} SMILES for {len(smiles):,} molecules"
    with timed(what):
        return in_chunks(
            _tokenized_chunk,
            smiles,
            canonical,
            options.descriptors,
            description=what,
            chunk=CHUNK,
            most=workers,
        )


def _tokenized_chunk(smiles, canonical, descriptors=()):
    """RDKit's canonical SMILES of a chunk (or, when not `canonical`, a parse check), split
    into tokens, and the `descriptors` of each molecule: the slow part of preparing, done
    in a pool process."""
    molecules = parsed_molecules(smiles, only_written=not descriptors)
    written = canonical_of(molecules)
    values = descriptors_of(molecules, descriptors) if descriptors else None
    if not canonical:
        written = [given if w is not None else None for given, w in zip(smiles, written)]
    tokens = [split_smiles(s) if s is not None else [] for s in written]
    vocabulary = sorted({tok for molecule in tokens for tok in molecule})
    index = {tok: i for i, tok in enumerate(vocabulary)}
    ids = np.fromiter((index[tok] for molecule in tokens for tok in molecule), dtype=np.int32)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    return _Chunk(written, vocabulary, lengths, ids, values)


def _vocabulary(options, chunks):
    seen = set().union(*(chunk.vocabulary for chunk in chunks))
    if options.vocabulary == "build":
        return SmilesTokenizer(sorted(seen))
    base = SmilesTokenizer(list(options.base_tokens))
    if options.vocabulary == "fixed":
        return base
    return SmilesTokenizer(base.tokens + sorted(seen - set(base.tokens)))


def _merged(chunks, tokenizer, base_tokens):
    """(every molecule's ids in `tokenizer`'s vocabulary, concatenated; each molecule's
    length; whether it holds a token outside `base_tokens`, a pretrained encoder's: <unk>
    with "fixed", a new, untrained embedding with "extend"). Each chunk's ids are mapped
    through a table as long as its vocabulary, not token by token."""
    unk, known = tokenizer.token_to_id[UNK], set(base_tokens)
    ids, unseen = [], []
    for chunk in chunks:
        table = np.array([tokenizer.token_to_id.get(t, unk) for t in chunk.vocabulary] or [0])
        ids.append(table[chunk.ids])
        new = np.array([bool(known) and t not in known for t in chunk.vocabulary] + [False])
        marks = np.concatenate([new[chunk.ids], [False]])  # a last item for empty molecules
        starts = np.concatenate([[0], np.cumsum(chunk.lengths)[:-1]])
        unseen.append(np.logical_or.reduceat(marks, starts) & (chunk.lengths > 0))
    lengths = np.concatenate([chunk.lengths for chunk in chunks])
    return np.concatenate(ids), lengths, np.concatenate(unseen)


# ------------------------------------------------------------ the cache
def cached_folder(source, options, checksum=None):
    """The cache folder of `source` prepared with `options` (a new name when either changes)."""
    name = Path(source).name.removesuffix(".gz").removesuffix(".csv")
    return cache_root() / "prepared" / f"{name}-{corpus_key(source, options, checksum)[:16]}"


def ensure_prepared(source, options=PrepareOptions(), folder=None, workers=None):
    """The prepared folder for `source`: `folder`, or its place in the cache. Every process
    of a node may call this at once: the first builds, under a lock, and the others wait for
    the lock, then find the folder built."""
    checksum = source_checksum(source)  # read once: a large CSV takes seconds to hash
    folder = Path(folder) if folder else cached_folder(source, options, checksum)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with node_lock(folder.with_name(f".{folder.name}.lock")):
        prepare(source, folder, options, workers, checksum)
    return folder


# ------------------------------------------------------------ reading
class PreparedCorpus:
    """A prepared folder, memory-mapped: only the molecules read are paged in, and the
    pages are shared by every process of the node (the OS's page cache)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        if self.meta.get("format") != FORMAT:
            raise DataError(f"{self.folder}: a prepared corpus of another format")
        self.offsets = np.load(self.folder / "offsets.npy", mmap_mode="r")
        self.labels = np.load(self.folder / "labels.npy", mmap_mode="r")
        self.rows = np.load(self.folder / "rows.npy", mmap_mode="r")
        self.tokenizer = tokenizer_from_dict(self.meta["tokenizer"])
        self.descriptor_columns = self.meta.get("descriptor_columns", [])
        self.descriptors = None
        if self.descriptor_columns:
            self.descriptors = np.load(self.folder / "descriptors.npy", mmap_mode="r")
        self._tokens = None  # opened on first use: a memmap sent to a loader worker is a copy

    def __len__(self):
        return len(self.offsets) - 1

    @property
    def digest(self):
        """What every rank can compare without reading the data again."""
        return self.meta["key"]

    @property
    def tokens(self):
        if self._tokens is None:
            dtype = np.dtype(self.meta["token_dtype"])
            self._tokens = np.memmap(self.folder / "tokens.bin", dtype=dtype, mode="r")
        return self._tokens

    def lengths(self, indices=None):
        lengths = np.diff(self.offsets)
        return lengths if indices is None else lengths[indices]

    def token_ids(self, i):
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def smiles(self, i):
        return self.tokenizer.decode(self.token_ids(i).tolist())

    def __getstate__(self):
        return {**self.__dict__, "_tokens": None}


class PreparedDataset(Dataset):
    """The molecules `indices` of a prepared corpus, as a SMILES dataset: items of (token
    ids, targets), read from the memory map when fetched. The targets are the corpus's
    labels, or with `descriptors=True` its descriptors standardised by the mean and standard
    deviation of `scale_from` (a training corpus; by default this one), NaN where one failed:
    what a pretraining run regresses onto."""

    collate = staticmethod(collate_token_ids)

    def __init__(self, corpus, indices, descriptors=False, scale_from=None):
        if descriptors and corpus.descriptors is None:
            raise DataError(
                f"{corpus.folder}: prepared without descriptors; prepare it with --descriptors"
            )
        self.corpus = corpus
        self.indices = np.asarray(indices, dtype=np.int64)
        self.lengths = corpus.lengths(self.indices)
        self.tokenizer = corpus.tokenizer
        self.targets = corpus.descriptors if descriptors else corpus.labels
        meta = (scale_from or corpus).meta
        self.shift = np.float32(meta["descriptor_mean"]) if descriptors else np.float32(0)
        self.scale = np.float32(meta["descriptor_std"]) if descriptors else np.float32(1)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        index = int(self.indices[i])
        ids = torch.from_numpy(self.corpus.token_ids(index).astype(np.int64))
        targets = (np.array(self.targets[index], dtype=np.float32) - self.shift) / self.scale
        return ids, torch.from_numpy(targets)
