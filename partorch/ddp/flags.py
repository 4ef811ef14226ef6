"""The scripts' flag parser: argparse, with the defaults shown in `--help`
and the exit policy of a job with many ranks (a bad flag is reported by
every rank, and none leaves before its peers could say so too)."""

import argparse
import os
import sys

import torch

from .config import ConfigError, apply_values, read_config
from .errors import exit_after_peers


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and `(default: X)` after the help of every flag that has one."""

    def _get_help_string(self, action):
        # `is`, not `in (None, False)`: 0 == False, and a default of 0 is worth showing
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _bounded(kind, holds, rule, adjective):
    """An argparse type that parses `kind` and refuses values for which `holds` is false, naming
    `rule` (argparse turns the ArgumentTypeError into one `error: argument --flag: ...` line)."""

    def parse(text):
        value = kind(text)
        if not holds(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    parse.__name__ = f"{adjective} {kind.__name__}"
    return parse


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser for a training script whose docstring is its description."""

    # --resume's arguments, for a script's `add_argument("--resume", **FlagParser.RESUME)`;
    # parse_args checks each mode against --output-dir
    RESUME = dict(
        nargs="?",
        const="yes",
        choices=["yes", "auto", "latest"],
        help="continue OUTPUT_DIR's snapshot (--resume alone: it must exist); auto: if there is "
        "one, else start (a requeued job); latest: the newest unfinished run in the default folder",
    )

    def __init__(self, doc, presets=None):
        """`presets`: see add_presets."""
        super().__init__(description=doc, formatter_class=_Formatter)
        self.presets = {}
        self.add_argument(
            "--config",
            metavar="FILE",
            help="YAML or JSON file of flag values, keyed by flag name (a run folder's "
            "config.yaml repeats that run); flags on the command line win over it",
        )
        if presets:
            self.add_presets(presets)

    def add_presets(self, presets):
        """--preset NAME: `presets` maps each name to flag values ({flag name: value}) that
        become defaults, as --config's do; a config file's values and the command line's win
        over them. The first name is the default; --help lists what each sets."""
        self.presets = dict(presets)
        described = "; ".join(f"{name}: {describe_flags(v)}" for name, v in self.presets.items())
        self.add_argument(
            "--preset",
            choices=list(self.presets),
            default=next(iter(self.presets)),
            help=f"a named set of flag values, which flags given here override ({described})",
        )

    @staticmethod
    def positive(kind):
        """An argparse type: `kind` (int or float), greater than 0."""
        return _bounded(kind, lambda value: value > 0, "> 0", "positive")

    @staticmethod
    def non_negative(kind):
        """An argparse type: `kind` (int or float), 0 or more."""
        return _bounded(kind, lambda value: value >= 0, ">= 0", "non-negative")

    @staticmethod
    def count(text):
        """An argparse type: an int, 0 or more (epochs of patience, worker processes...)."""
        return FlagParser.non_negative(int)(text)

    @staticmethod
    def fraction(text):
        """An argparse type: a float in [0, 1)."""
        value = float(text)
        if not 0 <= value < 1:
            raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
        return value

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message, sys.stderr)
        if status:  # a bad flag, on every rank: each says so before torchrun stops them all
            exit_after_peers(status)
        sys.exit(status)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else [str(arg) for arg in args]
        early = argparse.ArgumentParser(add_help=False)
        early.add_argument("--config")
        early.add_argument("--preset")
        known = early.parse_known_args(args)[0]
        try:  # defaults in layers: a preset's, then the file's; the command line wins over both
            from_file = read_config(known.config) if known.config else {}
            preset = known.preset or from_file.get("preset")
            if preset in self.presets:  # another name: argparse says so, naming the choices
                apply_values(self, self.presets[preset], f"--preset {preset}")
            apply_values(self, from_file, f"--config {known.config}")
        except ConfigError as exc:
            self.error(str(exc))
        parsed = super().parse_args(args, namespace)
        del parsed.config  # where the flags came from: their values are the run's flags
        resume = getattr(parsed, "resume", None)
        if resume in ("yes", "auto") and getattr(parsed, "output_dir", "") is None:
            flag = "--resume auto" if resume == "auto" else "--resume"
            self.error(f"{flag} needs --output-dir, the folder of the run to continue")
        if resume == "latest" and getattr(parsed, "output_dir", None) is not None:
            self.error("--resume latest finds the folder itself: drop --output-dir")
        if getattr(parsed, "init_from", None) is None:  # these would do nothing, silently
            for name, default in (("freeze_pretrained_epochs", 0), ("pretrained_lr_scale", 1)):
                if getattr(parsed, name, default) != default:
                    self.error(f"--{name.replace('_', '-')} needs --init-from, a pretrained start")
        if getattr(parsed, "amp", None) == "fp16" and not torch.cuda.is_available():
            self.error("--amp fp16 needs a CUDA GPU; on CPU use --amp bf16")
        return parsed


def describe_flags(values):
    """{flag name: value} as a command line's flags: `--augment --epochs 100`."""
    if not values:
        return "the defaults"
    words = []
    for name, value in values.items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, str) and os.path.isabs(value):  # a folder of this project's
            words.append(f"{flag} {os.path.relpath(value)}")
        else:
            words.append(f"{flag} {value}")
    return " ".join(words)


def flag_values(args, ignore=()):
    """{"flag --name": its value as text} for every flag of `args` but those
    in `ignore` (dests): what the ranks of one job compare before training."""
    return {
        f"flag --{name.replace('_', '-')}": repr(value)
        for name, value in sorted(vars(args).items())
        if name not in ignore
    }
