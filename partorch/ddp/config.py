"""Flag values from a file: `--config FILE` (YAML or JSON, one key a flag,
named as on the command line without its dashes) sets a script's defaults,
so that flags given on the command line still win; every run writes its
resolved flags to `config.yaml` in its folder, which `--config` reads back.

A value goes through its flag's own type and choices, so a file cannot pass
what the command line would refuse; a key that is no flag is an error."""

import argparse
import json
from pathlib import Path

import yaml

from .files import atomic_write_text

CONFIG_FILE = "config.yaml"
# Where and whether a run continues, not what it computes: the reader of a run's config.yaml
# starts a new run, in a folder of its own
NOT_SAVED = ("output_dir", "resume")


class ConfigError(ValueError):
    pass


def read_config(path):
    """The file's {key: value}, or a ConfigError saying why not."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read ({exc.strerror})") from None
    try:
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"--config {path}: not valid {_format(path)} ({first})") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: must map flag names to values, not a list or text")
    return values


def _format(path):
    return "JSON" if path.suffix == ".json" else "YAML"


def apply_values(parser, values, source):
    """Make each of `values` ({flag name: value}, from `source`: a file, a preset) the default
    of its flag in `parser`."""
    actions = _actions_by_name(parser)
    for key, value in values.items():
        action = actions.get(str(key).lstrip("-").replace("_", "-"))
        if action is None or action.dest == "config":
            raise ConfigError(f"{source}: unknown key {key!r}: no such flag in this script")
        try:
            action.default = _parsed(action, value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: {key}: {exc}") from None
        if not action.option_strings:  # a positional the file gives need not be typed again
            action.nargs, action.required = "?", False


def _actions_by_name(parser):
    """Each flag by its long names and its destination, dashed: `batch-size`, `seed`. A
    `--no-x` name is left out: `x: false` says it, and `no-x: true` would read as x."""
    actions = {}
    for action in parser._actions:
        names = [
            s.lstrip("-")
            for s in action.option_strings
            if s.startswith("--") and not s.startswith("--no-")
        ]
        for name in [*names, action.dest.replace("_", "-")]:
            actions[name] = action
    return actions


def _parsed(action, value):
    """`value` as the command line would have given it: typed and checked."""
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise TypeError(f"must be true or false, got {value!r}")
        return value
    if value is None:
        return None
    if action.nargs in ("+", "*"):
        items = value if isinstance(value, list) else [value]
        return [_one(action, item) for item in items]
    if isinstance(value, list):  # a flag such as --split-sizes 0.8,0.1,0.1, saved as a list
        value = ",".join(map(str, value))
    return _one(action, value)


def _one(action, value):
    if isinstance(value, bool) and action.choices is not None:
        value = _choice_yaml_read_as(value, action.choices)
    parsed = action.type(str(value)) if action.type else str(value)
    if action.choices is not None and parsed not in action.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    return parsed


def _choice_yaml_read_as(value, choices):
    """YAML 1.1 reads `amp: off` as false and `resume: yes` as true: the choice it meant."""
    for choice in choices:
        if isinstance(choice, str) and yaml.safe_load(choice) is value:
            return choice
    return value


def write_config(args, folder):
    """`folder/config.yaml`: every flag's value this run used, but NOT_SAVED's."""
    values = {
        dest.replace("_", "-"): list(value) if isinstance(value, tuple) else value
        for dest, value in vars(args).items()
        if dest not in NOT_SAVED
    }
    header = (
        "# The flags of this run, resolved: `--config THIS_FILE` trains it again (the same\n"
        "# splits and figures for the same seed) in a new folder; flags given after it win.\n"
    )
    text = header + yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
    atomic_write_text(text, Path(folder) / CONFIG_FILE)
