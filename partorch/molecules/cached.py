"""What RDKit computes for each molecule of a data set (canonical SMILES, scaffolds; the
features' descriptors and Morgan counts), kept in the cache for later runs: the ranks of a
node, the seeds of one data set and a restarted job read what one process computed, so
start-up on a large set (about 14 s for each on HIV's 41,127 molecules) is not paid again on
every rank and every run. See kept_in_cache for the locking and damaged files."""

import json

from ..ddp.distributed import digest
from ..ddp.files import cache_root, kept_in_cache
from .chem import rdkit_version

# Raise it when what chem writes for a molecule changes (parsed_molecules' rule for what does
# not parse, canonical_of, scaffold_smiles): every key changes, and nothing old is read.
MOLECULES_FORMAT = "partorch-molecules-1"


def cache_path(folder, file_format, name, smiles, *parts, suffix):
    """Where the cache keeps `name` of the molecules `smiles`: under a key of them, `parts`
    (what else the values depend on), RDKit's version and `file_format`."""
    key = digest([file_format, name, *parts, rdkit_version(), list(smiles)])
    return cache_root() / folder / f"{name.replace(' ', '-')}-{key[:16]}{suffix}"


def kept(compute, keep, *key, suffix, **how):
    """compute(), kept in the cache at cache_path(*key) with `keep` (`how`: kept_in_cache's
    save, load, fits and what); without it simply computed, and no key (a digest of every
    SMILES) is built: for library calls that did not ask for the cache."""
    if not keep:
        return compute()
    return kept_in_cache(cache_path(*key, suffix=suffix), compute, **how)


def cached_strings(name, function, smiles, keep=True):
    """function(smiles), one string (or None) per molecule, kept in the cache as `name`: one
    name, one function (the key holds the name, not the function). With `keep` false, simply
    computed: for library calls that did not ask for the cache."""
    smiles = list(smiles)
    return kept(
        lambda: function(smiles),
        keep,
        "molecules",
        MOLECULES_FORMAT,
        name,
        smiles,
        suffix=".json",
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
