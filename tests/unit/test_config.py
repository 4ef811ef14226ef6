"""--config FILE: values through each flag's own type and choices, the command line winning,
positionals from the file, and one error line naming the file and the key."""

from helpers import DDP, PRETRAIN, parser_of
import pytest
import yaml

from partorch.ddp.config import write_config


def test_file_values_become_defaults_and_the_command_line_wins(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "dataset: data/x.csv\nlr: 0.01\nlabel-column: [a, b]\nsplit_sizes: [0.8, 0.1, 0.1]\n"
        "augment: true\nbidirectional: false\nseed: 3\n"
    )
    args = parser_of(DDP).parse_args(["--config", str(path), "--seed", "4"])
    assert (args.dataset, args.lr, args.label_column) == ("data/x.csv", 0.01, ["a", "b"])
    assert args.split_sizes == (0.8, 0.1, 0.1) and args.augment and not args.bidirectional
    assert args.seed == 4  # the command line wins
    assert parser_of(DDP).parse_args(["other.csv", "--config", str(path)]).dataset == "other.csv"


def test_the_saved_config_reads_back_to_the_same_flags(tmp_path):
    args = parser_of(DDP).parse_args(["d.csv", "--lr-schedule", "cosine", "--output-dir", "o"])
    write_config(args, tmp_path)
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert "output-dir" not in saved and "resume" not in saved and "config" not in saved
    again = parser_of(DDP).parse_args(
        ["--config", str(tmp_path / "config.yaml"), "--output-dir", "o"]
    )
    assert vars(again) == vars(args)


@pytest.mark.parametrize(
    "content, message",
    [
        ("lr: 0.01\nlearning_rate: 0.1\n", "unknown key 'learning_rate'"),
        ("epochs: -1\n", "epochs: must be > 0, got -1"),
        ("sampler: sorted\n", "'sorted' is not one of bucket, random"),
        ("augment: 1\n", "augment: must be true or false"),
        ("- lr\n- 0.1\n", "must map flag names to values"),
        ("lr: [0.1\n", "not valid YAML"),
        ("config: other.yaml\n", "unknown key 'config'"),
    ],
)
def test_a_bad_config_file_is_one_error_naming_the_file_and_key(tmp_path, capsys, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SystemExit) as exit:
        parser_of(DDP).parse_args(["d.csv", "--config", str(path)])
    assert exit.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error and str(path) in error and "error:" in error, error


def test_a_missing_config_file_is_one_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parser_of(DDP).parse_args(["d.csv", "--config", str(tmp_path / "none.yaml")])
    assert "cannot read" in capsys.readouterr().err


def test_yaml_s_yes_and_off_are_the_choices_they_name_and_no_names_are_refused(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("dataset: d.csv\namp: off\nresume: yes\noutput-dir: o\n")
    args = parser_of(DDP).parse_args(["--config", str(path)])
    assert (args.amp, args.resume) == ("off", "yes")
    path.write_text("no-bidirectional: true\n")  # would read as bidirectional: true
    with pytest.raises(SystemExit):
        parser_of(DDP).parse_args(["d.csv", "--config", str(path)])
    assert "unknown key 'no-bidirectional'" in capsys.readouterr().err


def test_a_preset_sets_defaults_that_a_config_file_and_the_command_line_override(tmp_path):
    from partorch.molecules.flags import PRESETS, SHIPPED_ENCODER

    quick = parser_of(DDP).parse_args(["data.csv"])
    assert quick.preset == "quick" and quick.init_from is None and quick.epochs == 30
    accurate = parser_of(DDP).parse_args(["data.csv", "--preset", "accurate", "--epochs", "3"])
    assert accurate.preset == "accurate" and accurate.epochs == 3  # the command line wins
    assert accurate.init_from == str(SHIPPED_ENCODER) and SHIPPED_ENCODER.is_dir()
    for flag, value in PRESETS["accurate"].items():
        if flag != "epochs":
            assert getattr(accurate, flag.replace("-", "_")) == value
    path = tmp_path / "run.yaml"  # a run's config.yaml names its preset and its values
    path.write_text("preset: accurate\npatience: 7\n")
    from_file = parser_of(DDP).parse_args(["data.csv", "--config", str(path)])
    assert from_file.preset == "accurate" and from_file.patience == 7
    assert from_file.init_from == str(SHIPPED_ENCODER)


def test_help_lists_each_preset_and_what_it_sets(capsys):
    with pytest.raises(SystemExit):
        parser_of(DDP).parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--preset {quick,accurate}" in text and "quick: the defaults" in text
    assert (
        "accurate: --init-from models/moses_descriptors --extra-features rdkit2d-full+morgan "
        "--augment --epochs 100 --patience 20" in text
    )


def test_an_unknown_preset_or_a_preset_naming_no_flag_is_one_error(capsys):
    with pytest.raises(SystemExit):
        parser_of(DDP).parse_args(["data.csv", "--preset", "fastest"])
    assert "argument --preset: invalid choice: 'fastest'" in capsys.readouterr().err
    parser = parser_of(DDP)
    parser.presets["broken"] = {"no-such-flag": 1}
    with pytest.raises(SystemExit):
        parser.parse_args(["data.csv", "--preset", "broken"])
    assert "--preset broken: unknown key 'no-such-flag'" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--freeze-pretrained-epochs", "--pretrained-lr-scale"])
def test_a_flag_for_a_pretrained_start_without_one_is_one_error(flag, capsys):
    for script in (DDP, PRETRAIN):  # pretraining starts from nothing pretrained
        with pytest.raises(SystemExit):
            parser_of(script).parse_args(["data.csv", flag, "0.5"])
        assert f"{flag} needs --init-from, a pretrained start" in capsys.readouterr().err
    args = parser_of(DDP).parse_args(["data.csv", flag, "0.5", "--init-from", "encoder"])
    assert vars(args)[flag[2:].replace("-", "_")] == 0.5


def test_help_shows_a_default_of_zero_and_hides_only_none_and_false():
    text = " ".join(parser_of(DDP).format_help().split())
    assert "DataLoader worker processes (default: 0)" in text  # 0 == False, yet it is shown
    assert "up to --lr (a fraction is fine) (default: 0.0)" in text  # --warmup-epochs
    assert "(default: None)" not in text and "(default: False)" not in text


def test_pretraining_offers_the_encoder_s_flags_and_not_the_classifier_head_s():
    pretrain, classifier = parser_of(PRETRAIN).format_help(), parser_of(DDP).format_help()
    for flag in ("--embedding-dim", "--d-model", "--num-layers", "--bidirectional", "--dropout"):
        assert flag in pretrain and flag in classifier
    for flag in ("--head-size", "--feature-dropout"):  # its head is the objective's own
        assert flag not in pretrain and flag in classifier
