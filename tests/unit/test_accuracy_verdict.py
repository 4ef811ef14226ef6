"""The accuracy report's verdict: who wins, by how much, and when one side is a single figure."""
import importlib.util

import pytest

from helpers import SCRIPTS


@pytest.fixture(scope="module")
def verdict():
    spec = importlib.util.spec_from_file_location("accuracy_report", SCRIPTS / "accuracy_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.verdict


def test_a_gap_beyond_two_standard_errors_names_the_winner_and_the_margin(verdict):
    assert verdict([0.80, 0.82], [0.70, 0.71], higher_is_better=True) == "network better by 0.105"
    assert verdict([1.0, 1.1], [0.5, 0.6], higher_is_better=False) == "forest better by 0.500"  # RMSE


def test_a_gap_inside_the_noise_is_called_so(verdict):
    text = verdict([0.70, 0.80], [0.74, 0.75], higher_is_better=True)
    assert text.startswith("within noise (+0.005, two standard errors ") and "one" not in text


@pytest.mark.parametrize("network, forest, alone", [([0.77], [0.79, 0.80, 0.81], "one network figure"),
                                                    ([0.72, 0.73], [0.81], "one forest figure")])
def test_a_single_figure_is_flagged_since_its_spread_is_not_in_the_noise(verdict, network, forest, alone):
    text = verdict(network, forest, higher_is_better=False)
    assert f"({alone}: the noise leaves out its spread)" in text


def test_two_single_figures_are_both_named(verdict):
    text = verdict([0.77], [0.80], higher_is_better=True)
    assert text.endswith("(one network figure and one forest figure: the noise leaves out their spread)")
