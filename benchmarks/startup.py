"""What a training run spends before its first epoch, with an empty cache and then with the
cache that run left (what the next seed, the next rank of a node and a restarted job find):
each phase that `molecule_data` times, in one process.

    python benchmarks/startup.py dataset/HIV.csv --label-column HIV_active --split scaffold
    python benchmarks/startup.py dataset/BBBP.csv --extra-features rdkit2d+morgan

Every figure is the median of --repeats in this run; each empty-cache run gets a fresh temporary
cache, removed after. Nothing else should run meanwhile.
"""

import argparse
import logging
import os
from pathlib import Path
import re
import statistics
import tempfile
import time

from partorch.ddp.logs import log
from partorch.molecules import molecule_data
from partorch.molecules.features import FEATURE_KINDS
from partorch.molecules.splits import SPLITS


class StartupLog(logging.Handler):
    """The seconds of each "start-up: <phase> in <s> s" line, and what was read from the cache."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.seconds, self.read = {}, []

    def emit(self, record):
        message = record.getMessage()
        phase = re.fullmatch(r"start-up: (.*) in ([0-9.]+) s", message)
        if phase:
            self.seconds[phase[1]] = float(phase[2])
        cached = re.fullmatch(r"read [0-9,]+ molecules' (.*) from .*", message)
        if cached:
            self.read.append(cached[1])


def one_start(args):
    """(seconds in all, each phase's seconds, what came from the cache) of one molecule_data."""
    startup = StartupLog()
    log.addHandler(startup)
    started = time.perf_counter()
    molecule_data(
        args.csv,
        smiles_column=args.smiles_column,
        label_columns=args.label_column,
        split=args.split,
        extra_features=args.extra_features,
    )
    seconds = time.perf_counter() - started
    log.removeHandler(startup)
    return seconds, startup.seconds, startup.read


def medians(runs):
    """The median total and the median of each phase, over runs of one kind."""
    phases = {phase: statistics.median(run[1][phase] for run in runs) for phase in runs[0][1]}
    return statistics.median(run[0] for run in runs), phases


def timed_starts(args):
    """(empty cache runs, kept cache runs): each empty-cache run in a new cache (the first
    also imports RDKit: the median leaves it out), then --repeats runs in the last one."""
    empty, kept = [], []
    with tempfile.TemporaryDirectory() as caches:
        for repeat in range(args.repeats):
            os.environ["PARTORCH_CACHE"] = str(Path(caches) / str(repeat))
            empty.append(one_start(args))
        kept = [one_start(args) for _ in range(args.repeats)]
    return empty, kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--smiles-column", default="smiles")
    parser.add_argument("--label-column", nargs="+", default=["p_np"])
    parser.add_argument("--split", choices=SPLITS, default="scaffold")
    parser.add_argument("--extra-features", choices=FEATURE_KINDS, default="morgan")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    log.setLevel(logging.INFO)
    empty, kept = timed_starts(args)
    (empty_total, empty_phases), (kept_total, kept_phases) = medians(empty), medians(kept)
    print(
        f"{args.csv}: --split {args.split} --extra-features {args.extra_features}, "
        f"one process, median of {args.repeats}"
    )
    print("| phase | empty cache (s) | cache kept (s) |")
    print("|---|---|---|")
    for phase, seconds in empty_phases.items():
        print(f"| {phase} | {seconds:.2f} | {kept_phases.get(phase, float('nan')):.2f} |")
    print(f"| all of start-up | {empty_total:.2f} | {kept_total:.2f} |")
    print(f"with the cache kept: {empty_total / kept_total:.1f}x faster")
    print(f"read from the cache: {', '.join(kept[-1][2]) or 'nothing'}")


if __name__ == "__main__":
    main()
