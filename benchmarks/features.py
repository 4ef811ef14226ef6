"""What --extra-features costs at start-up: each kind's seconds a molecule in one process, all of
RDKit's descriptors over a pool of the host's cores, and the next run's read from the cache.

    python benchmarks/features.py dataset/HIV.csv --molecules 10000
    python benchmarks/features.py dataset/BBBP.csv

Every figure is the median of --repeats timings in this run, on the first --molecules SMILES
of the CSV; nothing else should run meanwhile. The cache is a temporary folder, removed after.
"""

import argparse
from functools import partial
import os
from pathlib import Path
import statistics
import tempfile
import time

import numpy as np
import pandas as pd

from partorch.ddp.distributed import available_cores
from partorch.molecules import chunked, features


def median_seconds(work, repeats):
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def one_process_rows(smiles, repeats):
    """(kind, seconds, microseconds a molecule) for each kind, computed in this process."""
    rows = []
    pool_mins = features.DESCRIPTORS_POOL_MIN, chunked.POOL_MIN_MOLECULES
    features.DESCRIPTORS_POOL_MIN = chunked.POOL_MIN_MOLECULES = float("inf")
    for kind in features.FEATURE_KINDS[1:]:  # once untimed: RDKit's first calls set up tables
        features.raw_features(kind, smiles[:20], features.descriptor_names(kind))
    for kind in features.FEATURE_KINDS[1:]:
        names = features.descriptor_names(kind)
        compute = partial(features.raw_features, kind, smiles, names)
        seconds, _ = median_seconds(compute, repeats)
        rows.append((kind, seconds, seconds / len(smiles) * 1e6))
    features.DESCRIPTORS_POOL_MIN, chunked.POOL_MIN_MOLECULES = pool_mins
    return rows


def pool_and_cache_rows(smiles, repeats):
    """rdkit2d-full's descriptors: in this process, over the pool, and read from the cache."""
    kind, names = "rdkit2d-full", features.descriptor_names("rdkit2d-full")
    alone, expected = median_seconds(
        lambda: features._descriptors_of_smiles(smiles, kind, names), repeats
    )
    pooled, values = median_seconds(
        lambda: features._descriptor_values(kind, smiles, names, cache=False), repeats
    )
    assert np.array_equal(values, expected, equal_nan=True), "the pool computed other values"
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PARTORCH_CACHE"] = cache
        features._descriptor_values(kind, smiles, names, cache=True)  # computed, then kept
        read, _ = median_seconds(
            lambda: features._descriptor_values(kind, smiles, names, cache=True), repeats
        )
    return alone, pooled, read


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--smiles-column", default="smiles")
    parser.add_argument("--molecules", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--pool-min",
        type=int,
        default=features.DESCRIPTORS_POOL_MIN,
        help="molecules from which a pool computes (default: what training runs use)",
    )
    parser.add_argument(
        "--pool-chunk",
        type=int,
        default=chunked.CHUNK,
        help="molecules a pool task computes (default: what training runs use)",
    )
    args = parser.parse_args()
    features.DESCRIPTORS_POOL_MIN, chunked.CHUNK = args.pool_min, args.pool_chunk
    column = pd.read_csv(args.csv, usecols=[args.smiles_column], nrows=args.molecules)
    smiles = column[args.smiles_column].astype(str).tolist()
    print(
        f"{args.csv}: {len(smiles):,} molecules, {available_cores()} cores, median of "
        f"{args.repeats}"
    )
    print("| --extra-features | seconds, one process | microseconds a molecule |")
    print("|---|---|---|")
    for kind, seconds, micro in one_process_rows(smiles, args.repeats):
        print(f"| {kind} | {seconds:.2f} | {micro:,.0f} |")
    alone, pooled, read = pool_and_cache_rows(smiles, args.repeats)
    workers = chunked.pool_workers(len(smiles), least=features.DESCRIPTORS_POOL_MIN)
    pool = f"a pool of {workers} processes" if workers > 1 else "no pool (too few molecules)"
    print(
        f"rdkit2d-full descriptors: one process {alone:.2f} s; {pool} {pooled:.2f} s "
        f"({alone / pooled:.2f}x); read from the cache {read:.3f} s ({alone / read:,.0f}x)"
    )


if __name__ == "__main__":
    main()
