"""What RDKit writes per molecule (canonical SMILES, scaffolds) is computed once and read back
by later runs and the other processes of a node; a damaged or unwritable cache costs only time."""

from helpers import count_calls, python_at_once
import pytest

from partorch.ddp import distributed, files
from partorch.molecules import cached as cached_module
from partorch.molecules import chem, chunked
from partorch.molecules.cached import cached_strings
from partorch.molecules.chem import canonical_smiles, scaffold_smiles
from partorch.molecules.splits import scaffold_groups
from partorch.molecules.table import read_molecule_csv

SMILES = ["OCC", "c1ccccc1O", "C1=CC=CC=C1O", "not a molecule", "CC(=O)Nc1ccc(O)cc1"]


def test_strings_are_computed_once_per_molecules_and_name(monkeypatch, tmp_path):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, chem, "canonical_smiles")
    first = cached_strings("canonical SMILES", chem.canonical_smiles, SMILES)
    again = cached_strings("canonical SMILES", chem.canonical_smiles, SMILES)
    assert first == again and first[:2] == ["CCO", "Oc1ccccc1"] and first[3] is None
    assert calls == [(SMILES,)]
    cached_strings("canonical SMILES", chem.canonical_smiles, SMILES[:2])  # other molecules
    assert calls == [(SMILES,), (SMILES[:2],)]
    scaffolds = count_calls(monkeypatch, chem, "scaffold_smiles")
    parsed = [s for s in first if s is not None]
    assert cached_strings("scaffolds", chem.scaffold_smiles, parsed)[:2] == ["", "c1ccccc1"]
    assert scaffolds == [(parsed,)] and len(calls) == 2
    assert len(list((tmp_path / "molecules").glob("*.json"))) == 3


def test_the_key_holds_rdkit_s_version(monkeypatch, tmp_path):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, chem, "canonical_smiles")
    cached_strings("canonical SMILES", chem.canonical_smiles, SMILES)
    monkeypatch.setattr(cached_module, "rdkit_version", lambda: "1999.01.1")
    cached_strings("canonical SMILES", chem.canonical_smiles, SMILES)
    assert len(calls) == 2  # another RDKit may write other canonical SMILES


@pytest.mark.parametrize(
    "damage",
    ["", "not json", "[]", '["CCO"', "[1, 2, 3, 4, 5]", "[" * 100_000, '{"CCO": 1}'],
    ids=["empty", "not json", "too few", "cut short", "not strings", "too deep", "not a list"],
)
def test_a_damaged_file_is_computed_again_and_replaced(monkeypatch, tmp_path, damage, caplog):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    written = cached_strings("canonical SMILES", canonical_smiles, SMILES)
    [path] = (tmp_path / "molecules").glob("*.json")
    path.write_text(damage)
    with caplog.at_level("WARNING", logger="partorch"):
        assert cached_strings("canonical SMILES", canonical_smiles, SMILES) == written
    assert str(path) in caplog.text and "computing" in caplog.text
    assert cached_strings("canonical SMILES", lambda s: pytest.fail("computed"), SMILES) == written


def cache_in_a_file(monkeypatch, tmp_path):
    """Points the cache at a file: no folder, no lock, as on a read-only home."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("PARTORCH_CACHE", str(not_a_folder))


def test_a_cache_that_cannot_be_made_costs_the_run_nothing(monkeypatch, tmp_path, caplog):
    cache_in_a_file(monkeypatch, tmp_path)
    with caplog.at_level("WARNING", logger="partorch"):
        written = cached_strings("scaffolds", scaffold_smiles, SMILES[:3])
    assert written == ["", "c1ccccc1", "c1ccccc1"]  # ethanol has no ring
    assert "could not use the cache for 3 molecules' scaffolds" in caplog.text


def test_without_the_cache_s_lock_each_process_pools_over_its_share_of_the_cores(
    monkeypatch, tmp_path, caplog
):
    monkeypatch.setattr(distributed, "available_cores", lambda: 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # a node of 2 cores and 2 ranks
    monkeypatch.setattr(chunked, "POOL_MIN_MOLECULES", 0)
    monkeypatch.setattr(chunked, "CHUNK", 100)
    smiles = [s for s in SMILES if s != "not a molecule"] * 100
    cache_in_a_file(monkeypatch, tmp_path)
    with caplog.at_level("INFO", logger="partorch"):
        alone = scaffold_groups(smiles, cache=True)  # both ranks compute: a core each
    assert "could not use the cache for 400 molecules' scaffolds" in caplog.text
    assert "over a pool" not in caplog.text
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    with caplog.at_level("INFO", logger="partorch"):
        pooled = scaffold_groups(smiles, cache=True)  # the other rank would wait on the lock
    assert "scaffolds: over a pool of 2 processes" in caplog.text
    assert pooled == alone


def test_a_table_and_its_scaffold_groups_read_back_are_the_ones_computed(
    monkeypatch, tmp_path, caplog
):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    path = tmp_path / "molecules.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(SMILES)))
    first = read_molecule_csv(path, "smiles", ["y"], smiles_form="canonical", cache=True)
    groups = scaffold_groups(first.smiles, cache=True)
    with caplog.at_level("INFO", logger="partorch"):
        again = read_molecule_csv(path, "smiles", ["y"], smiles_form="canonical", cache=True)
        assert scaffold_groups(again.smiles, cache=True) == groups == [[1, 2, 3], [0]]
    assert "read 5 molecules' canonical SMILES" in caplog.text
    assert "read 4 molecules' scaffolds" in caplog.text
    assert again.smiles == first.smiles and again.warnings == first.warnings
    assert list(again.rows) == [2, 3, 4, 6]  # row 5 does not parse: dropped, as the first time
    assert any("row 5" in w or "rows 5" in w for w in again.warnings), again.warnings
    assert scaffold_groups(again.smiles) == groups  # computed: by default nothing is kept
    assert len(list((tmp_path / "molecules").glob("*.json"))) == 2


def test_a_warm_cache_is_read_without_its_lock(monkeypatch, tmp_path):
    monkeypatch.setenv("PARTORCH_CACHE", str(tmp_path))
    written = cached_strings("canonical SMILES", canonical_smiles, SMILES)
    monkeypatch.setattr(files, "node_lock", lambda path: pytest.fail("locked to read"))
    assert cached_strings("canonical SMILES", lambda s: pytest.fail("computed"), SMILES) == written


DATA_AT_ONCE = """
import json, logging, sys
from partorch.molecules import molecule_data
logging.getLogger("partorch").addHandler(logging.StreamHandler(sys.stdout))
logging.getLogger("partorch").setLevel(logging.INFO)
data = molecule_data(sys.argv[1], split="scaffold", extra_features="morgan")
print(json.dumps(data.digests, sort_keys=True))
"""


def test_processes_of_one_node_compute_once_and_build_the_same_data(tmp_path, bbbp_subset):
    stdouts = python_at_once(DATA_AT_ONCE, [bbbp_subset], {"PARTORCH_CACHE": str(tmp_path)})
    for what in ("canonical SMILES", "scaffolds", "Morgan counts"):
        assert sum(f"' {what} into " in out for out in stdouts) == 1, stdouts
        assert sum(f"' {what} from " in out for out in stdouts) == 2, stdouts
    digests = [out.strip().splitlines()[-1] for out in stdouts]
    assert len(set(digests)) == 1 and '"split"' in digests[0], digests
