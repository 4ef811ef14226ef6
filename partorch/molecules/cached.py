"""What RDKit writes for each molecule of a list (canonical SMILES, scaffolds), kept in the
cache for later runs: the ranks of a node, the seeds of one data set and a restarted job read
what one process computed, so start-up on a large set (about 14 s for each on HIV's 41,127
molecules) is not paid again on every rank and every run."""

import json

from ..ddp.distributed import digest
from ..ddp.files import cache_root, kept_in_cache
from .chem import rdkit_version

MOLECULES_FORMAT = "partorch-molecules-1"  # raises every key when a computation changes


def cached_strings(name, function, smiles):
    """function(smiles), one string (or None) per molecule, kept in cache_root()/molecules
    under a key of the molecules, `name` and RDKit's version (see kept_in_cache)."""
    smiles = list(smiles)
    key = digest([MOLECULES_FORMAT, name, rdkit_version(), smiles])
    return kept_in_cache(
        cache_root() / "molecules" / f"{name.replace(' ', '-')}-{key[:16]}.json",
        lambda: function(smiles),
        save=lambda strings, file: file.write(json.dumps(strings).encode()),
        load=lambda path: json.loads(path.read_text()),
        fits=lambda strings: _strings_for(strings, len(smiles)),
        what=f"{len(smiles):,} molecules' {name}",
    )


def _strings_for(value, count):
    return (
        isinstance(value, list)
        and len(value) == count
        and all(s is None or isinstance(s, str) for s in value)
    )
