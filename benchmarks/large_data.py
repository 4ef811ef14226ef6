"""Large corpora: preparing them, start-up and memory per rank as they grow, and pretraining
throughput on the largest. Run through benchmarks/speed.py:

    python benchmarks/speed.py --large      # BBBP, HIV, HIV x10, MOSES; writes docs/large_data.md
    python benchmarks/speed.py --large --large-datasets BBBP=dataset/BBBP.csv \\
        HIV=dataset/HIV.csv MOSES=dataset/MOSES_train.csv.gz --output-dir docs

HIV x10 is built here, in a temporary folder, as HIV's rows ten times over. For each data set:
scripts/prepare_data.py's time (its meta.json's "seconds" and the command's wall time) and its
counts, the largest corpus prepared --large-prepare-repeats times (the median reported); then
scripts/pretrain_ddp.py on 2 processes with --max-steps 1, timed from launching torchrun to the
`first optimizer step` line of the slower rank, with the largest unique memory (USS) of a rank
at that step: (a) from the prepared folder, --large-repeats times, the median reported; (b) from
the CSV with an empty cache (PARTORCH_CACHE), so preparing is part of it. On the largest corpus
(by tokens), pretraining throughput on 1 process of 1 thread, on 1 process with all threads and
on 2 processes of 1 thread each: the tokens/s of the log line after --large-steps timed steps,
which follow a warm-up window of as many steps; the speed-ups, and MFU against a float32 matmul
peak measured in the same run for the same number of threads. Targets: the largest corpus is
prepared in at most 3 minutes, starts at most 1.5x as slowly as the smallest and takes at most
100 MB more per rank; 2 processes run at least 1.85x as fast as 1, each process with the same
resources (a thread: a core here, as a GPU a process on a GPU box); MFU 60 %. The speed-up at
equal cores (2 x 1 against 1 x all) is reported beside it: what DDP wins over one process's own
threads on one host. Figures are as measured, met or not.
"""

from datetime import datetime
import gzip
import json
import os
from pathlib import Path
import re
import shutil
import statistics
import sys
import tempfile
import time

from speed import cpu_description, lstm_training_flops, matmul_peak, run_job

ROOT = Path(__file__).resolve().parents[1]
PREPARE = ROOT / "scripts" / "prepare_data.py"
PRETRAIN = ROOT / "scripts" / "pretrain_ddp.py"
DEFAULT_DATASETS = [
    "BBBP=dataset/BBBP.csv",
    "HIV=dataset/HIV.csv",
    "MOSES=dataset/MOSES_train.csv.gz",
]
TIMES = 10  # HIV x10
TARGETS = dict(prepare_seconds=180, startup_ratio=1.5, extra_uss_mb=100, speedup=1.85, mfu=0.60)
FIRST_STEP = re.compile(
    r"^(\S+ \S+) \[rank\d+\] INFO start-up: first optimizer step taken; "
    r"unique memory (\d+) MB"
)
STEP_LINE = re.compile(r"\] INFO step (\d+)  epoch \d+  loss \S+  ([\d,]+) tokens/s")


def positive(text):
    value = int(text)
    if value < 1:
        raise ValueError(text)  # argparse: "invalid positive value"
    return value


def add_arguments(parser):
    group = parser.add_argument_group("large data (--large, benchmarks/large_data.py)")
    add = group.add_argument
    add(
        "--large",
        action="store_true",
        help="measure large corpora into OUTPUT_DIR/large_data.md and .json; alone it does only "
        "that (with --datasets, --reference or --lightning, those run too)",
    )
    add(
        "--large-datasets",
        nargs="+",
        default=DEFAULT_DATASETS,
        metavar="NAME=CSV",
        help="CSV or .csv.gz files with a --smiles-column; one named HIV is also measured ten "
        f"times over as HIVx10 (default: {' '.join(DEFAULT_DATASETS)})",
    )
    add(
        "--large-repeats",
        type=positive,
        default=3,
        help="start-ups from a prepared folder; the median (default: %(default)s)",
    )
    add(
        "--large-prepare-repeats",
        type=positive,
        default=3,
        help="preparations of the largest corpus (by tokens), each into a new folder; the median "
        "(default: %(default)s)",
    )
    add(
        "--large-steps",
        type=positive,
        default=30,
        help="timed steps after as many warm-up steps (default: %(default)s)",
    )
    add(
        "--large-batch-size", type=positive, default=256, help="global batch (default: %(default)s)"
    )
    add(
        "--large-model",
        type=positive,
        nargs=3,
        default=[128, 128, 3],
        metavar=("EMBEDDING", "D_MODEL", "LAYERS"),
        help="the bidirectional LSTM encoder (default: 128 128 3; pretrain_ddp.py's own default "
        "is 128 64 2)",
    )
    add(
        "--large-eval-molecules",
        type=positive,
        default=100,
        help="held out in each run (default: %(default)s)",
    )


# ---------------------------------------------------------------- inputs
def parse_datasets(specs):
    """[(name, path)] from NAME=PATH, checked before minutes of measuring."""
    datasets = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"error: --large-datasets {spec}: expected NAME=PATH")
        path = Path(path) if Path(path).is_file() else ROOT / path  # the default's: in ROOT
        if not path.is_file():
            raise SystemExit(
                f"error: --large-datasets {spec}: no such file (HIV: python dataset/place_data.py "
                "HIV; MOSES: its training CSV, e.g. MOSES=path/to/MOSES_train.csv.gz)"
            )
        datasets.append((name, path.resolve()))  # the jobs run in ROOT
    return datasets


def repeated_csv(source, times, target):
    """`source`'s rows `times` over, under its header, as a plain CSV at `target`."""
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", newline="") as f:
        header, body = f.readline(), f.read()
    if body and not body.endswith("\n"):
        body += "\n"
    with open(target, "w", newline="") as f:
        f.write(header)
        for _ in range(times):
            f.write(body)
    return target


def with_repeats(datasets, work):
    """[(name, CSV, what it is)]: the data sets, with HIV x10 after the one named HIV."""
    out = []
    for name, path in datasets:
        out.append((name, path, str(path)))
        if name == "HIV":
            copy = repeated_csv(path, TIMES, work / f"HIVx{TIMES}.csv")
            out.append((f"HIVx{TIMES}", copy, f"{path}, its rows {TIMES} times"))
    return out


# ---------------------------------------------------------------- measurements
def prepare(name, path, source, folder, smiles_column):
    """prepare_data.py on one CSV: its own seconds, the wall time and the counts."""
    if folder.exists():
        shutil.rmtree(folder)  # a repeat: built anew, never reused
    start = time.perf_counter()
    command = [sys.executable, str(PREPARE), str(path), "--output-dir", str(folder)]
    run_job(command + ["--smiles-column", smiles_column, "--quiet"], dict(os.environ))
    wall = time.perf_counter() - start
    meta = json.loads((folder / "meta.json").read_text())
    row = dict(
        name=name,
        source=source,
        csv=str(path),
        folder=str(folder),
        molecules=meta["molecules"],
        tokens=meta["tokens"],
        prepare_seconds=meta["seconds"],
        wall_seconds=wall,
        prepare_runs=[meta["seconds"]],
    )
    print(
        f"{name:>9} prepared: {row['molecules']:,} molecules, {row['tokens']:,} tokens in "
        f"{row['prepare_seconds']:.1f} s ({wall:.1f} s wall)",
        flush=True,
    )
    return row


def prepare_again(row, repeats, smiles_column):
    """Prepares `row`'s CSV `repeats - 1` more times and records the median of all its runs in
    `row`: the machine's speed drifts by several per cent between minutes-long runs."""
    for _ in range(repeats - 1):
        again = prepare(row["name"], row["csv"], row["source"], Path(row["folder"]), smiles_column)
        row["prepare_runs"] += again["prepare_runs"]
    row["prepare_seconds"] = statistics.median(row["prepare_runs"])


def pretrain(corpus, procs, output, args, extra=(), env=None):
    """One pretrain_ddp.py job under torchrun; returns the second it was launched."""
    embedding, d_model, layers = args.large_model
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={procs}",
        str(PRETRAIN),
        str(corpus),
        "--smiles-column",
        args.smiles_column,
        "--output-dir",
        str(output),
        "--batch-size",
        str(args.large_batch_size),
        "--embedding-dim",
        str(embedding),
        "--d-model",
        str(d_model),
        "--num-layers",
        str(layers),
        "--eval-molecules",
        str(args.large_eval_molecules),
        "--quiet",
        *extra,
    ]
    launched = time.time()
    run_job(command, {**os.environ, **(env or {})})
    return launched


def first_step(output):
    """(when the slower rank took its first optimizer step, the largest USS in MB) from the
    ranks' logs."""
    stamps, memory = [], []
    for log in sorted((output / "logs").glob("rank*.log")):
        for line in log.read_text().splitlines():
            match = FIRST_STEP.match(line)
            if match:
                when = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f")
                stamps.append(when.timestamp())
                memory.append(int(match[2]))
    if not stamps:
        raise SystemExit(f"error: {output}/logs: no `first optimizer step` line")
    return max(stamps), max(memory), len(stamps)


def startup(corpus, output, cache, args):
    """Seconds from launching torchrun (2 processes) to the slower rank's first step, and the
    largest USS of a rank then."""
    launched = pretrain(corpus, 2, output, args, ["--max-steps", "1"], {"PARTORCH_CACHE": cache})
    stamp, uss, ranks = first_step(output)
    return dict(seconds=stamp - launched, uss_mb=uss, ranks=ranks)


def startups(row, work, args):
    """Start-up of one data set: from its prepared folder (repeated, median) and from its CSV
    with an empty cache."""
    name = row["name"]
    warm = [
        startup(row["folder"], work / f"{name}-prepared-{i}", str(work / "cache"), args)
        for i in range(args.large_repeats)
    ]
    cold = startup(row["csv"], work / f"{name}-csv", str(work / f"cache-{name}"), args)
    result = dict(
        name=name,
        molecules=row["molecules"],
        prepared_seconds=statistics.median(r["seconds"] for r in warm),
        prepared_uss_mb=statistics.median(r["uss_mb"] for r in warm),
        prepared_runs=warm,
        csv_seconds=cold["seconds"],
        csv_uss_mb=cold["uss_mb"],
    )
    print(
        f"{name:>9} start-up: {result['prepared_seconds']:.1f} s, "
        f"{result['prepared_uss_mb']:.0f} MB from the prepared folder; "
        f"{result['csv_seconds']:.1f} s, {result['csv_uss_mb']:.0f} MB from the CSV (cold cache)",
        flush=True,
    )
    return result


def windowed_tokens_per_second(output, step):
    """The tokens/s of rank 0's log line at `step` (the window of steps before it)."""
    for line in (output / "logs" / "rank0.log").read_text().splitlines():
        match = STEP_LINE.search(line)
        if match and int(match[1]) == step:
            return float(match[2].replace(",", ""))
    raise SystemExit(f"error: {output}/logs/rank0.log: no log line at step {step}")


def throughput(row, procs, threads, work, peaks, args):
    """Tokens/s over the timed window, model FLOP/s and MFU for one configuration."""
    steps = args.large_steps
    output = work / f"{row['name']}-throughput-{procs}x{threads}"
    every = ["--log-every-steps", str(steps), "--max-steps", str(2 * steps)]
    every += ["--eval-every-steps", str(2 * steps), "--snapshot-every-steps", str(2 * steps)]
    every += ["--epochs", str(2 * steps)]  # enough however short an epoch: --max-steps ends it
    env = {"OMP_NUM_THREADS": str(threads), "PARTORCH_CACHE": str(work / "cache")}
    pretrain(row["folder"], procs, output, args, every + ["--threads", str(threads)], env)
    tokens_per_second = windowed_tokens_per_second(output, 2 * steps)
    embedding, d_model, layers = args.large_model
    per_token = lstm_training_flops(1, embedding, d_model, layers, bidirectional=True)
    flops = per_token * tokens_per_second
    peak = peaks[procs * threads]
    metrics = json.loads((output / "metrics.json").read_text())
    result = dict(
        name=row["name"],
        procs=procs,
        threads=threads,
        tokens_per_second=tokens_per_second,
        whole_run_tokens_per_second=metrics["tokens_per_second"],
        flops_per_second=flops,
        peak_flops_per_second=peak,
        mfu=flops / peak,
    )
    print(
        f"{row['name']:>9} {procs} proc x {threads} thr: {tokens_per_second:,.0f} tokens/s, "
        f"MFU {100 * result['mfu']:.1f} %",
        flush=True,
    )
    return result


# ---------------------------------------------------------------- figures
def targets(prepared, starts, speeds):
    """The targets' figures: largest against smallest corpus (by tokens), 2 processes against 1
    of as many threads each, and against 1 with all the threads."""
    small = min(prepared, key=lambda r: r["tokens"])["name"]
    largest = max(prepared, key=lambda r: r["tokens"])
    large = largest["name"]
    by_name = {s["name"]: s for s in starts}
    one, one_all, two = speeds
    return dict(
        smallest=small,
        largest=large,
        prepare_seconds=largest["prepare_seconds"],
        startup_ratio=by_name[large]["prepared_seconds"] / by_name[small]["prepared_seconds"],
        extra_uss_mb=by_name[large]["prepared_uss_mb"] - by_name[small]["prepared_uss_mb"],
        speedup=two["tokens_per_second"] / one["tokens_per_second"],
        speedup_same_cores=two["tokens_per_second"] / one_all["tokens_per_second"],
        mfu={f"{s['procs']}x{s['threads']}": s["mfu"] for s in speeds},
    )


def verdict(met):
    return "met" if met else "**not met**"


def markdown(prepared, starts, speeds, figures, args, command):
    embedding, d_model, layers = args.large_model
    small, large = figures["smallest"], figures["largest"]
    lines = [
        "# Large corpora: preparing, start-up, memory and throughput",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {cpu_description()}, {os.cpu_count()} cores.",
        "",
        f"Model: bidirectional LSTM encoder, embedding {embedding}, hidden {d_model}, layers "
        f"{layers}; global batch {args.large_batch_size}.",
        "",
        "## Preparing (scripts/prepare_data.py)",
        "",
        f"Seconds from meta.json; for {large}, the median of {args.large_prepare_repeats} "
        "preparations (each run's in the last column); the command's wall time is the first's.",
        "",
        "| data | molecules | tokens | preparing (s) | command wall time (s) | runs (s) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['name']} | {r['molecules']:,} | {r['tokens']:,} | {r['prepare_seconds']:.1f} "
        f"| {r['wall_seconds']:.1f} | {', '.join(f'{s:.1f}' for s in r['prepare_runs'])} |"
        for r in prepared
    ]
    seconds = figures["prepare_seconds"]
    lines += [
        "",
        f"- Preparing {large}: {seconds:.1f} s (target at most {TARGETS['prepare_seconds']} s "
        f"on {os.cpu_count()} cores): {verdict(seconds <= TARGETS['prepare_seconds'])}.",
    ]
    lines += [
        "",
        "## Start-up to the first optimizer step (2 processes, --max-steps 1)",
        "",
        "Seconds from launching torchrun to the slower rank's `first optimizer step` log line; "
        "USS: the largest unique memory of a rank at that step. From the prepared folder: the "
        f"median of {args.large_repeats} run(s); from the CSV: an empty cache, so preparing is "
        "included.",
        "",
        "| data | molecules | prepared: start-up (s) | prepared: USS (MB) "
        "| CSV, cold cache: start-up (s) | CSV, cold cache: USS (MB) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['name']} | {s['molecules']:,} | {s['prepared_seconds']:.2f} "
        f"| {s['prepared_uss_mb']:.0f} | {s['csv_seconds']:.2f} | {s['csv_uss_mb']:.0f} |"
        for s in starts
    ]
    ratio, extra = figures["startup_ratio"], figures["extra_uss_mb"]
    lines += [
        "",
        f"- Start-up, {large} against {small}: {ratio:.2f}x (target at most "
        f"{TARGETS['startup_ratio']}x): {verdict(ratio <= TARGETS['startup_ratio'])}.",
        f"- USS, {large} minus {small}: {extra:.0f} MB (target at most "
        f"{TARGETS['extra_uss_mb']} MB): {verdict(extra <= TARGETS['extra_uss_mb'])}.",
        "",
        f"## Pretraining throughput ({large})",
        "",
        f"Tokens/s of the log window of {args.large_steps} steps after a warm-up window of as "
        "many. Model FLOP/s: the LSTM's matmul FLOPs per real token (x3 for training) times "
        "tokens/s; MFU against the float32 matmul peak measured in this run for as many threads.",
        "",
        "| processes x threads | tokens/s | model GFLOP/s | matmul peak GFLOP/s | MFU "
        "| whole run tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['procs']} x {s['threads']} | {s['tokens_per_second']:,.0f} "
        f"| {s['flops_per_second'] / 1e9:.2f} | {s['peak_flops_per_second'] / 1e9:.1f} "
        f"| {100 * s['mfu']:.1f} % | {s['whole_run_tokens_per_second']:,.0f} |"
        for s in speeds
    ]
    one, one_all, two = speeds
    lines += [
        "",
        f"- Speed-up, {two['procs']} x {two['threads']} against {one['procs']} x "
        f"{one['threads']} (each process alike): {figures['speedup']:.2f}x (target at least "
        f"{TARGETS['speedup']}x): {verdict(figures['speedup'] >= TARGETS['speedup'])}.",
        f"- Speed-up at equal cores, {two['procs']} x {two['threads']} against "
        f"{one_all['procs']} x {one_all['threads']}: {figures['speedup_same_cores']:.2f}x.",
    ]
    lines += [mfu_line(s) for s in speeds]
    return "\n".join(lines) + "\n"


def mfu_line(speed):
    """The MFU target holds the runs of one thread a process: DDP pretraining with a process on
    each core (2 x 1 here) and one such process alone, the speed-up's base. One process that
    spreads its matmuls over every core is the equal-cores reference, the case that data
    parallelism replaces: reported, with no target of its own."""
    line = f"- MFU, {speed['procs']} x {speed['threads']}: {100 * speed['mfu']:.1f} %"
    if speed["threads"] > 1:
        return line + " (one process on every core, the equal-cores reference: no target)."
    met = verdict(speed["mfu"] >= TARGETS["mfu"])
    return line + f" (target {100 * TARGETS['mfu']:.0f} %): {met}."


# ---------------------------------------------------------------- driver
def run(args, command):
    """Every measurement, then OUTPUT_DIR/large_data.md and large_data.json."""
    datasets = parse_datasets(args.large_datasets)
    cores = os.cpu_count()
    configs = [(1, 1), (1, cores), (2, 1)]  # (processes, threads each)
    with tempfile.TemporaryDirectory(prefix="partorch-large-") as tmp:
        work = Path(tmp)
        datasets = with_repeats(datasets, work)
        prepared = [
            prepare(name, path, source, work / "prepared" / name, args.smiles_column)
            for name, path, source in datasets
        ]
        largest = max(prepared, key=lambda r: r["tokens"])
        prepare_again(largest, args.large_prepare_repeats, args.smiles_column)
        starts = [startups(row, work, args) for row in prepared]
        peaks = {p * t: matmul_peak(p * t) for p, t in configs}
        speeds = [throughput(largest, p, t, work, peaks, args) for p, t in configs]
    for row in prepared:  # their temporary paths are gone
        del row["csv"], row["folder"]
    figures = targets(prepared, starts, speeds)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    report = markdown(prepared, starts, speeds, figures, args, command)
    (output / "large_data.md").write_text(report)
    settings = {k: v for k, v in vars(args).items() if k.startswith("large")}
    (output / "large_data.json").write_text(
        json.dumps(
            dict(
                command=command,
                settings=settings,
                cpu=cpu_description(),
                cores=cores,
                peaks=peaks,
                prepared=prepared,
                startup=starts,
                throughput=speeds,
                targets=TARGETS,
                figures=figures,
            ),
            indent=1,
        )
    )
    print(report, flush=True)
    print(f"wrote {output / 'large_data.md'} and {output / 'large_data.json'}")
