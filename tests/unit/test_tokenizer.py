import pytest

from partorch.molecules.tokenizer import (
    BytesTokenizer,
    SmilesTokenizer,
    TokenizerError,
    load_tokenizer,
    save_tokenizer,
    split_smiles,
)


@pytest.mark.parametrize(
    "smiles, tokens",
    [
        ("CC(=O)Cl", ["C", "C", "(", "=", "O", ")", "Cl"]),
        ("c1ccc(Br)cc1", ["c", "1", "c", "c", "c", "(", "Br", ")", "c", "c", "1"]),
        ("N[C@@H](C)C(=O)O", ["N", "[C@@H]", "(", "C", ")", "C", "(", "=", "O", ")", "O"]),
        ("C%12CC%12", ["C", "%12", "C", "C", "%12"]),
        ("[Na+].[Cl-]", ["[Na+]", ".", "[Cl-]"]),
    ],
)
def test_smiles_regex_keeps_atoms_whole(smiles, tokens):
    assert split_smiles(smiles) == tokens
    assert "".join(split_smiles(smiles)) == smiles


def test_smiles_round_trip_and_unknown_token():
    tokenizer = SmilesTokenizer.build(["CCO", "c1ccccc1Cl", "[NH4+]"])
    for s in ["CCO", "c1ccccc1Cl", "[NH4+]"]:
        ids = tokenizer.encode(s)
        assert 0 not in ids and tokenizer.decode(ids) == s
    assert tokenizer.encode("Br") == [tokenizer.token_to_id["<unk>"]]
    assert tokenizer.unknown_tokens("CCBr") == ["Br"] and tokenizer.unknown_tokens("CCO") == []


def test_vocabulary_is_independent_of_row_order():
    rows = ["CCO", "c1ccccc1Cl", "[NH4+]", "BrCC#N"]
    assert SmilesTokenizer.build(rows).tokens == SmilesTokenizer.build(rows[::-1]).tokens
    assert SmilesTokenizer.build(rows).tokens[:2] == ["<pad>", "<unk>"]


def test_tokenizer_json_round_trip(tmp_path):
    tokenizer = SmilesTokenizer.build(["CCO", "C[C@@H](Cl)Br"])
    save_tokenizer(tokenizer, tmp_path / "t.json")
    loaded = load_tokenizer(tmp_path / "t.json")
    assert loaded.tokens == tokenizer.tokens
    assert loaded.encode("C[C@@H](Cl)Br") == tokenizer.encode("C[C@@H](Cl)Br")


def test_bytes_tokenizer_round_trip_and_clear_error():
    tokenizer = BytesTokenizer()
    ids = tokenizer.encode("CC(=O)O")
    assert ids == [ord(c) for c in "CC(=O)O"] and 0 not in ids
    assert tokenizer.decode(ids + [0, 0]) == "CC(=O)O"
    with pytest.raises(TokenizerError, match="cannot encode 'é'"):
        tokenizer.encode("CCé")


def test_corrupt_tokenizer_file_is_a_clear_error(tmp_path):
    (tmp_path / "t.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot read tokenizer"):
        load_tokenizer(tmp_path / "t.json")
