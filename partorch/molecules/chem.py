"""The chemistry that needs RDKit: parsing checks, canonical SMILES,
Bemis-Murcko scaffolds, Morgan fingerprints, 2D descriptors, random SMILES. RDKit is imported
inside each function, so that modules which only import this one load fast."""

import re

import numpy as np

from ..ddp.errors import PartorchError

# What RDKit does not read as one molecule: a space (the rest is a name to it), a control or a
# non-ASCII character.
_UNREADABLE = re.compile(r"[^\x21-\x7e]")
# What only RDKit's whole parse handles: a hydrogen atom ([H], [2H], [H+]: not Hg, He, Hf, Ho,
# Hs) for it to remove, and stereo marks for it to perceive.
_NEEDS_WHOLE_PARSE = re.compile(r"[@/\\]|\[\d*H(?![efgos])")


def _rdkit():
    try:
        from rdkit import Chem, RDLogger
    except ImportError:
        raise PartorchError("this needs RDKit: pip install rdkit") from None
    RDLogger.DisableLog("rdApp.*")  # we report bad molecules ourselves, once
    return Chem


def parsed_molecules(smiles, only_written=False):
    """Each SMILES as an RDKit molecule; None where RDKit cannot parse it. RDKit reads only up
    to the first space, control or non-ASCII character (the rest is a name to it: "CCé" would
    be ethane), so such strings count as unparsable. Parsing costs more than writing a canonical
    SMILES: parse once, then write, describe and fingerprint the same molecules (the `_of`
    functions below). `only_written`: the molecules will only be written as SMILES, never
    described or fingerprinted, so their parse may skip what only those read (_sanitize_ops)."""
    Chem = _rdkit()
    ops = _sanitize_ops(Chem, only_written)
    return [None if _UNREADABLE.search(s) else _parsed(Chem, s, ops) for s in smiles]


def _sanitize_ops(Chem, only_written):
    """What the short parse sanitizes: everything, or, for a molecule that is only written,
    everything but conjugation and hybridization (descriptors read them, the SMILES writer
    does not) and the stereo clean-ups (the short parse takes no stereo marks): 3 to 7 % of a
    canonical SMILES's cost. Skip all four: the atropisomer clean-up without the other two
    costs more than the whole. The unparsable set and every string written stay RDKit's own:
    tests/unit/test_chem.py checks odd molecules, and all 1.8 million molecules of MOSES and
    of each MoleculeNet set here were written identically."""
    flags = Chem.SanitizeFlags
    if not only_written:
        return flags.SANITIZE_ALL
    return flags.SANITIZE_ALL ^ (
        flags.SANITIZE_SETCONJUGATION
        | flags.SANITIZE_SETHYBRIDIZATION
        | flags.SANITIZE_CLEANUPCHIRALITY
        | getattr(flags, "SANITIZE_CLEANUPATROPISOMERS", 0)  # older RDKits lack it
    )


def _parsed(Chem, smiles, sanitize_ops):
    """Chem.MolFromSmiles(smiles), the same molecule for less work where it can be: RDKit's
    parse sanitizes, then removes hydrogen atoms (sanitizing once more) and perceives stereo.
    A SMILES with neither hydrogen atoms nor stereo marks, as most are, gets from those two
    steps nothing but their cost: 7 % of canonicalising MOSES. (Its molecule does not say
    that stereo is perceived, as MolFromSmiles's do: RDKit perceives it where it is needed, in
    writing a SMILES or counting stereocentres. Saying so would skip that, and miscount.)"""
    if not smiles or _NEEDS_WHOLE_PARSE.search(smiles):
        return Chem.MolFromSmiles(smiles)
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        return None
    try:
        Chem.SanitizeMol(mol, sanitizeOps=sanitize_ops)
    except Exception:  # a rare molecule: MolFromSmiles decides, None or its own error
        return Chem.MolFromSmiles(smiles)
    return mol


def canonical_smiles(smiles):
    """Each SMILES as RDKit writes it canonically (one string per molecule,
    whatever style the source wrote it in); None where RDKit cannot parse it."""
    return canonical_of(parsed_molecules(smiles, only_written=True))


def canonical_of(molecules):
    """canonical_smiles of molecules already parsed (None stays None)."""
    Chem = _rdkit()
    return [None if mol is None else Chem.MolToSmiles(mol) for mol in molecules]


def scaffold_smiles(smiles):
    """Each molecule's Bemis-Murcko scaffold, without stereo, as SMILES ("" for one with no
    ring). Every SMILES must parse."""
    _rdkit()
    from rdkit.Chem.Scaffolds import MurckoScaffold

    return [MurckoScaffold.MurckoScaffoldSmiles(mol=mol) for mol in parsed_molecules(smiles)]


def morgan_fingerprints(smiles, radius=2, bits=2048, counts=False):
    """One row of bits per molecule (with `counts`: how often each hashed environment
    occurs); all zeros where RDKit cannot parse it."""
    return fingerprints_of(parsed_molecules(smiles), radius, bits, counts)


def fingerprints_of(molecules, radius=2, bits=2048, counts=False):
    """morgan_fingerprints of molecules already parsed (zeros for None)."""
    _rdkit()
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    fingerprint = (
        generator.GetCountFingerprintAsNumPy if counts else generator.GetFingerprintAsNumPy
    )
    rows = np.zeros((len(molecules), bits), dtype=np.uint32 if counts else np.uint8)
    for i, mol in enumerate(molecules):
        if mol is not None:
            rows[i] = fingerprint(mol)
    return rows


# RDKit 2D descriptors that cost at most about 0.5 ms a molecule together on one core (qed
# and BertzCT alone would cost 2.5 ms): size, polarity, hydrogen bonding, flexibility, rings.
DESCRIPTORS = (
    "MolWt",
    "HeavyAtomCount",
    "MolLogP",
    "MolMR",
    "TPSA",
    "LabuteASA",
    "NumHDonors",
    "NumHAcceptors",
    "NumRotatableBonds",
    "RingCount",
    "NumAromaticRings",
    "NumAliphaticRings",
    "NumHeteroatoms",
    "FractionCSP3",
    "BalabanJ",
)


def rdkit_version():
    _rdkit()
    import rdkit

    return rdkit.__version__


def all_descriptor_names():
    """The names of every 2D descriptor the installed RDKit computes (217 in RDKit 2026.09;
    other versions have more or fewer: a model records the names it was trained with)."""
    _rdkit()
    from rdkit.Chem import Descriptors

    return tuple(name for name, _ in Descriptors.descList)


def molecular_descriptors(smiles, names=DESCRIPTORS):
    """float64 [molecules, len(names)]: RDKit's descriptors `names` of each molecule; a row of
    NaN where RDKit cannot parse it, NaN where one descriptor fails or is not finite."""
    return descriptors_of(parsed_molecules(smiles), names)


def descriptors_of(molecules, names=DESCRIPTORS):
    """molecular_descriptors of molecules already parsed (a row of NaN for None, and for the
    empty molecule RDKit makes of an empty string)."""
    _rdkit()
    from rdkit.Chem import Descriptors

    functions = dict(Descriptors.descList)
    unknown = [name for name in names if name not in functions]
    if unknown:
        raise PartorchError(f"unknown RDKit descriptor(s): {', '.join(unknown)}")
    rows = np.full((len(molecules), len(names)), np.nan)
    for i, mol in enumerate(molecules):
        if mol is not None and mol.GetNumAtoms():
            rows[i] = [_descriptor(functions[name], mol) for name in names]
    rows[~np.isfinite(rows)] = np.nan
    return rows


def _descriptor(function, mol):
    try:
        return float(function(mol))
    except Exception:  # RDKit raises assorted errors on odd molecules; one cell, not the run
        return np.nan


def random_smiles(smiles_list, rng):
    """Each molecule written as a random (non-canonical) SMILES: atoms
    renumbered by `rng`, so the result depends only on the generator's seed.
    A string RDKit cannot parse is returned unchanged."""
    Chem = _rdkit()
    out = []
    for s, mol in zip(smiles_list, parsed_molecules(smiles_list, only_written=True)):
        if mol is None or mol.GetNumAtoms() == 0:
            out.append(s)
            continue
        order = rng.permutation(mol.GetNumAtoms()).tolist()
        out.append(Chem.MolToSmiles(Chem.RenumberAtoms(mol, order), canonical=False))
    return out


# Marks that point along the string, so a bond walked the other way takes the other one: a
# double bond's geometry (/ and \) and a dative bond's arrow (-> and <-, HIV's metal complexes).
MIRRORED_MARKS = ("/\\", "<>")


def augmentation_vocabulary_strings(smiles_list, canonical=False):
    """Strings whose tokens cover what random SMILES of these molecules can contain, found
    without writing any: a random SMILES spells the atoms and bonds as RDKit writes them (so
    each molecule is written once, canonically, unless `canonical` says the strings are RDKit's
    canonical SMILES already: a file's own style may differ), and its atom order changes only
    the branches, the ring-closure labels (here up to %19), which of @ and @@ marks a
    stereocentre, and the other mark of a MIRRORED_MARKS pair. Writing five random SMILES of
    each molecule instead cost 104 s a rank on HIV's 41,000."""
    written = (
        smiles_list
        if canonical
        else [c or s for c, s in zip(canonical_smiles(smiles_list), smiles_list)]
    )
    flipped = [s.replace("@@", "\0").replace("@", "@@").replace("\0", "@") for s in written]
    held = set().union(*map(set, written))
    mirrored = "".join(pair for pair in MIRRORED_MARKS if held & set(pair))
    ring_labels = "0123456789" + "".join(f"%{n}" for n in range(10, 20))
    return written + flipped + ["()" + mirrored + ring_labels]
