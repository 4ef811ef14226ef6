"""parsed_molecules: RDKit's own parse, for less work where that changes nothing, and for
less still where the molecules are only written as SMILES."""

import numpy as np
import pytest

from partorch.molecules import chem
from partorch.molecules.chem import (
    all_descriptor_names,
    canonical_of,
    canonical_smiles,
    descriptors_of,
    fingerprints_of,
    parsed_molecules,
    random_smiles,
)

# Each kind of SMILES the short path and the whole parse divide: hydrogen atoms (plain,
# isotopic, charged, H2), another isotope and elements whose symbol starts with H; a
# stereocentre left unspecified (counting it needs stereo perceived), and stereo marks;
# charges, metals and a dative bond (HIV holds such); radicals, atom maps, aromatic nitrogen's
# hydrogen; and what RDKit refuses (valence, kekulization, syntax), an empty string and
# unreadable ones.
SMILES = [
    "[H]N=c1cc[nH]cc1",
    "[2H]C([2H])([2H])O",
    "[H+]",
    "[HH]",
    "[13CH3]C(=O)O",
    "CC[Hg]Cl",
    "[He]",
    "F[Hf](F)(F)F",
    "CC(N)C(=O)O",
    "C[C@H](N)C(=O)O",
    "C[C@@]1(O)CCCC[C@H]1N",
    "F/C=C/F",
    "F\\C=C/Cl",
    "[Na+].[Cl-]",
    "CN(=O)=O",
    "C[N+](C)(C)C.[O-]S(=O)(=O)C",
    "N->[Pt+2]<-N",
    "[CH2]C",
    "[CH3:1][OH:2]",
    "c1cc[nH]c1",
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",
    "C(C)(C)(C)(C)C",
    "c1ccc1",
    "c1cccc1",
    "C1CC",
    "CC(",
    "",
    "C C",
    "CCé",
    "C\tC",
    "C\x01C",
]


def reference(smiles):
    from rdkit import Chem

    return [
        Chem.MolFromSmiles(s) if s.isascii() and s.isprintable() and " " not in s else None
        for s in smiles
    ]


@pytest.mark.unit
def test_parsed_molecules_are_rdkits_own_parse():
    ours, theirs = parsed_molecules(SMILES), reference(SMILES)
    assert [m is None for m in ours] == [m is None for m in theirs]
    assert sum(m is None for m in ours) == 8  # valence, kekulization, 2 syntax, 4 unreadable
    assert canonical_of(ours) == canonical_of(theirs)
    assert canonical_of(ours)[:4] == ["N=c1cc[nH]cc1", "[2H]C([2H])([2H])O", "[H+]", "[HH]"]
    np.testing.assert_array_equal(
        fingerprints_of(ours, counts=True), fingerprints_of(theirs, counts=True)
    )
    every = all_descriptor_names()  # stereocentre counts among them: they need stereo perceived
    np.testing.assert_array_equal(descriptors_of(ours, every), descriptors_of(theirs, every))


@pytest.mark.unit
def test_only_hydrogen_atoms_and_stereo_take_the_whole_parse(monkeypatch):
    from rdkit import Chem

    parse, whole = Chem.MolFromSmiles, []

    def counted(smiles, *args, **kwargs):
        if not args and not kwargs:
            whole.append(smiles)
        return parse(smiles, *args, **kwargs)

    monkeypatch.setattr(Chem, "MolFromSmiles", counted)
    parsed_molecules(["CCO", "CC[Hg]Cl", "[He]", "[H]OC", "[2H]C", "C[C@H](N)O", "F/C=C/F"])
    assert whole == ["[H]OC", "[2H]C", "C[C@H](N)O", "F/C=C/F"]


@pytest.mark.unit
def test_molecules_only_written_write_as_rdkits_own(monkeypatch):
    ours, theirs = parsed_molecules(SMILES, only_written=True), reference(SMILES)
    assert [m is None for m in ours] == [m is None for m in theirs]
    assert canonical_of(ours) == canonical_of(theirs) == canonical_smiles(SMILES)
    written = [random_smiles(SMILES, np.random.default_rng(seed)) for seed in range(5)]
    # the same random writing, of the molecules RDKit's own parse makes
    parsed = []
    monkeypatch.setattr(
        chem, "parsed_molecules", lambda smiles, **_: parsed.append(smiles) or reference(smiles)
    )
    assert written == [random_smiles(SMILES, np.random.default_rng(seed)) for seed in range(5)]
    assert parsed == [SMILES] * 5


@pytest.mark.unit
def test_only_written_skips_what_only_descriptors_read():
    from rdkit import Chem

    unspecified = Chem.HybridizationType.UNSPECIFIED
    written, described = (
        parsed_molecules(["CC=O", "C[C@H](N)O"], only_written=True),
        parsed_molecules(["CC=O"]),
    )
    assert written[0].GetAtomWithIdx(1).GetHybridization() == unspecified
    assert described[0].GetAtomWithIdx(1).GetHybridization() == Chem.HybridizationType.SP2
    assert written[1].GetAtomWithIdx(1).GetHybridization() != unspecified  # stereo: whole parse
