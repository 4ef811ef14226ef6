"""Turn SMILES strings into integer ids.

Two tokenizers share one small interface (`encode`, `decode`, `vocab_size`,
`to_dict`). Id 0 is always padding. The SMILES tokenizer's vocabulary is built
from the *whole* data set before any sharding and sorted, so every rank that
reads the same file builds the same vocabulary.
"""

import json
import re

from ..ddp.errors import PartorchError
from .chem import augmentation_vocabulary_strings

PAD, UNK = "<pad>", "<unk>"

# Atom-level SMILES tokens: bracket atoms, two-letter halogens, two-digit ring
# closures, then any single character. The catch-all `.` keeps every character
# of the input, so tokens always join back to the original string.
SMILES_TOKEN_PATTERN = re.compile(r"\[[^\]]+\]|Br|Cl|%\d{2}|.")


class TokenizerError(PartorchError):
    pass


def split_smiles(smiles):
    return SMILES_TOKEN_PATTERN.findall(smiles)


class BytesTokenizer:
    """Fixed vocabulary: ASCII code points 1-127 map to themselves, 0 pads."""

    name = "bytes"
    vocab_size = 128

    def encode(self, smiles):
        if not self.can_encode(smiles):
            bad = next(ch for ch in smiles if not 0 < ord(ch) < 128)
            raise TokenizerError(f"bytes tokenizer cannot encode {bad!r} in {smiles!r}")
        return list(smiles.encode("ascii"))

    def can_encode(self, smiles):
        return smiles.isascii() and "\0" not in smiles

    def unknown_tokens(self, smiles):
        return [ch for ch in smiles if not 0 < ord(ch) < 128]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i != 0)

    def to_dict(self):
        return {"type": self.name}


class SmilesTokenizer:
    """Regex tokenizer; unknown tokens map to `<unk>` instead of crashing."""

    name = "smiles"

    def __init__(self, tokens):
        self.tokens = [PAD, UNK] + [t for t in tokens if t not in (PAD, UNK)]
        self.token_to_id = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls, smiles_list):
        # Sorted, so the vocabulary does not depend on row order or on which
        # rank built it.
        return cls(sorted({tok for s in smiles_list for tok in split_smiles(s)}))

    @property
    def vocab_size(self):
        return len(self.tokens)

    def encode(self, smiles):
        unk = self.token_to_id[UNK]
        return [self.token_to_id.get(tok, unk) for tok in split_smiles(smiles)]

    def can_encode(self, smiles):
        return True  # unknown tokens become <unk>

    def unknown_tokens(self, smiles):
        """Tokens outside the vocabulary (the model never saw them in training)."""
        return [tok for tok in split_smiles(smiles) if tok not in self.token_to_id]

    def decode(self, ids):
        return "".join(self.tokens[i] for i in ids if i != 0)

    def to_dict(self):
        return {"type": self.name, "tokens": self.tokens}


def build_tokenizer(kind, table, random_smiles=False, base_tokens=(), canonical=False):
    """The tokenizer for a MoleculeTable, its vocabulary built from the whole
    file (every rank reads the same file, so every rank builds the same one).
    With `random_smiles` (augmentation), the vocabulary also covers what
    random SMILES of these molecules can contain, so they never meet <unk> (`canonical`: the
    table's SMILES are RDKit's canonical ones, so they need not be written again for it).
    With `base_tokens` (a pretrained encoder's vocabulary), those come first, in
    their order, and the file's tokens they lack follow, sorted: the encoder's
    ids keep their meaning and each new token gets an embedding of its own."""
    if kind == "bytes" and base_tokens:
        raise TokenizerError(
            "the bytes tokenizer's vocabulary is fixed: it cannot extend a pretrained "
            "encoder's (use --tokenizer smiles with --init-from)"
        )
    if kind == "bytes":
        tokenizer = BytesTokenizer()
    elif kind == "smiles":
        extra = augmentation_vocabulary_strings(table.smiles, canonical) if random_smiles else []
        tokenizer = SmilesTokenizer.build(table.smiles + extra)
        if base_tokens:
            known = set(base_tokens)
            new = [t for t in tokenizer.tokens if t not in known]
            tokenizer = SmilesTokenizer(list(base_tokens) + new)
    else:
        raise TokenizerError(f"unknown tokenizer {kind!r}: choose 'smiles' or 'bytes'")
    bad_rows = [row for s, row in zip(table.smiles, table.rows) if not tokenizer.can_encode(s)]
    if bad_rows:
        raise TokenizerError(
            f"{table.source}: the {kind} tokenizer cannot encode the SMILES "
            f"at rows {', '.join(map(str, bad_rows[:5]))}"
        )
    return tokenizer


def unseen_token_warning(table, base_tokens, source):
    """A warning counting the molecules that hold tokens outside `base_tokens` (what a
    pretrained encoder never saw), naming the most frequent; None when there are none."""
    known, counts, holding = set(base_tokens), {}, 0
    for smiles in table.smiles:
        unseen = set(split_smiles(smiles)) - known
        holding += bool(unseen)
        for token in unseen:
            counts[token] = counts.get(token, 0) + 1
    if not holding:
        return None
    common = ", ".join(sorted(counts, key=counts.get, reverse=True)[:5])
    return (
        f"{source}: {holding} of {len(table.smiles)} molecules hold tokens the pretrained "
        f"encoder never saw (most often {common}): each such token starts from a fresh "
        "embedding, learnt in fine-tuning"
    )


def tokenizer_from_dict(spec):
    if spec.get("type") == "bytes":
        return BytesTokenizer()
    if spec.get("type") == "smiles" and isinstance(spec.get("tokens"), list):
        return SmilesTokenizer(spec["tokens"])
    raise TokenizerError(f"not a partorch tokenizer description: {str(spec)[:80]}")


def save_tokenizer(tokenizer, path):
    with open(path, "w") as f:
        json.dump(tokenizer.to_dict(), f, indent=1)


def load_tokenizer(path):
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"cannot read tokenizer {path}: {exc}") from None
    return tokenizer_from_dict(spec)
