"""Training throughput on this machine: partorch against the tutorial's loop,
against PyTorch Lightning, and against itself on 1, 2, ... processes.

    python benchmarks/speed.py --reference --lightning   # BBBP and HIV, writes docs/benchmarks.md
    python benchmarks/speed.py --datasets my.csv --label-column y --steps 10
    python benchmarks/speed.py --large   # large corpora (benchmarks/large_data.py) only

For each data set it launches, via torchrun, a fixed number of training steps
of the benchmark's model (MODEL) on 1 process with all cores, then 1, 2, ... processes of
one thread each (or one per GPU); the same with the layer-by-layer LSTM path
the fused call replaced; and the control for DDP's own cost: N processes
training alone at once, with no gradient exchange. With --reference, the
tutorial's data path and loop on 1 process; with --lightning (pip install -e
'.[bench]'), whole epochs of Lightning's DDP and of partorch's DDP script
side by side, with their test ROC AUC. Reported: samples/s, tokens/s, model
FLOP/s, MFU against a float32 matmul peak measured in the same run, and peak
memory per process. Figures are whatever this machine does while it runs:
compare the ratios within one run.
"""

import argparse
from datetime import timedelta
import importlib.util
import itertools
import json
import os
from pathlib import Path
import platform
import resource
import subprocess
import sys
import tempfile
import time

import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = [
    ("dataset/BBBP.csv", "smiles", "p_np"),
    ("dataset/HIV.csv", "smiles", "HIV_active"),
]
# Three layers of 128 each way (the scripts' earlier default, kept so that figures stay
# comparable across the docs' history); the scripts default to 2 layers of 64 now.
MODEL = dict(embedding_dim=128, d_model=128, num_layers=3, bidirectional=True)


def lstm_training_flops(tokens, embedding_dim, d_model, num_layers, bidirectional, **_):
    """Matmul FLOPs to train on `tokens` real tokens: forward, plus twice that backward."""
    directions = 2 if bidirectional else 1
    per_token = sum(
        directions
        * 2
        * 4
        * d_model
        * ((embedding_dim if layer == 0 else directions * d_model) + d_model)
        for layer in range(num_layers)
    )
    return 3 * per_token * tokens


def cpu_description(path=Path("/proc/cpuinfo")):
    """The CPU's model name, family and model, and its widest float vector unit: machines that
    share a name ("AMD EPYC" under KVM) differ in all of these, and with them the matmul peak
    that MFU divides by."""
    if not path.exists():
        return platform.processor() or "?"
    fields = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    vector = next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "none")
    name = fields.get("model name", platform.processor() or "?")
    family, model = fields.get("cpu family", "?"), fields.get("model", "?")
    return f"{name} (family {family}, model {model}, {vector})"


def matmul_peak(threads, size=1024, repeats=20):
    """Best float32 matmul FLOP/s with this many threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = max(best, 2 * size**3 * repeats / (time.perf_counter() - start))
    return best


# ---------------------------------------------------------------- worker side
def worker(args):
    import torch.distributed as dist

    from partorch.ddp.distributed import rendezvous
    from partorch.ddp.errors import exit_without_teardown

    timeout = timedelta(seconds=300)
    dist.init_process_group(
        "nccl" if torch.cuda.is_available() else "gloo", timeout=timeout, **rendezvous(timeout)
    )
    try:
        measure(args, dist.get_rank(), dist.get_world_size())
    finally:
        dist.destroy_process_group()
    exit_without_teardown()  # measure() ends milliseconds after its last backward pass


def measure(args, rank, world_size):
    from partorch import SmilesTokenizer, read_molecule_csv, split_indices
    from partorch.ddp.distributed import all_gather_object

    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    table = read_molecule_csv(args.dataset, args.smiles_column, [args.label_column])
    labels = table.labels[:, 0]
    train = split_indices(len(labels), seed=0, classes=labels.astype(int)).train
    tokenizer = SmilesTokenizer.build(table.smiles)
    smiles, labels = [table.smiles[i] for i in train], labels[train]
    setup = reference_setup if args.loop == "tutorial" else partorch_setup
    steps_per_epoch, run = setup(args, (rank, world_size, device), smiles, labels, tokenizer)
    run(args.warmup)
    start = time.perf_counter()
    samples, tokens = run(args.steps)  # ends with a host sync: the device has finished
    seconds = max(all_gather_object(time.perf_counter() - start))
    totals = torch.tensor([samples, tokens], dtype=torch.float64)
    torch.distributed.all_reduce(totals)
    memory_mb = all_gather_object(peak_memory_mb(device))
    if rank == 0:
        Path(args.out).write_text(
            json.dumps(
                dict(
                    samples=totals[0].item(),
                    tokens=totals[1].item(),
                    seconds=seconds,
                    steps=args.steps,
                    steps_per_epoch=steps_per_epoch,
                    peak_memory_mb=memory_mb,
                )
            )
        )


class BatchStream:
    """A loader's batches, epoch after epoch, handed to the training
    script's own train_one_epoch `steps` at a time (it reads `dataset` for
    its progress bar and iterates)."""

    def __init__(self, loader):
        self.loader, self.dataset = loader, loader.dataset
        self.batches = self._forever()
        self.steps = self.samples = self.tokens = 0

    def _forever(self):
        for epoch in itertools.count():
            self.loader.batch_sampler.set_epoch(epoch)
            yield from self.loader

    def take(self, steps):
        self.steps, self.samples, self.tokens = steps, 0, 0
        return self

    def __iter__(self):
        for _, batch in zip(range(self.steps), self.batches):
            self.samples, self.tokens = (
                self.samples + len(batch),
                self.tokens + int(batch.inputs[1].sum()),
            )
            yield batch


def partorch_setup(args, placement, smiles, labels, tokenizer):
    """The DDP script's own train_one_epoch on the benchmark's model."""
    from torch.nn.parallel import DistributedDataParallel

    sys.path.insert(0, str(ROOT / "scripts"))  # the loop measured is the DDP rung's own
    from basic_neural_network_ddp import train_one_epoch

    from partorch import (
        BinaryClassification,
        RNNPredictor,
        get_ddp_dataloader,
        optimization,
        smiles_dataset,
    )

    rank, world_size, device = placement
    loader = get_ddp_dataloader(
        smiles_dataset(smiles, labels, tokenizer),
        rank=rank,
        world_size=world_size,
        batch_size=args.batch_size,
        shuffle=True,
    )
    model = RNNPredictor(tokenizer.vocab_size, **MODEL).to(device)
    if args.loop == "layer-by-layer":  # the path every batch took before the fused call
        model.encode = lambda tokens, lengths: model._encode_mixed_lengths(
            model.embedding(tokens), lengths
        )
    # "independent": the control, each process training alone (no gradient exchange) on its shard
    ddp_model = (
        model
        if args.loop == "independent"
        else DistributedDataParallel(
            model,
            device_ids=[device] if device.type == "cuda" else None,
            gradient_as_bucket_view=True,
        )
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(enabled=args.amp == "fp16")
    flags = argparse.Namespace(
        amp=args.amp, batch_size=args.batch_size, accumulate=1, quiet=True, clip_grad_norm=None
    )
    schedule = argparse.Namespace(lr_schedule="constant", warmup_epochs=0.0, epochs=1)
    constant = optimization.lr_schedule(optimizer, schedule, steps_per_epoch=1)
    stream, task = BatchStream(loader), BinaryClassification(["label"])

    def run(steps):
        train_one_epoch(
            ddp_model, optimizer, constant, scaler, stream.take(steps), task, flags, device, False
        )
        return stream.samples, stream.tokens

    return len(loader), run


def reference_setup(args, placement, smiles, labels, tokenizer):
    from torch.utils.tensorboard import SummaryWriter
    from tutorial_reference import PackedRNNPredictor, reference_batches, reference_step

    model = PackedRNNPredictor(tokenizer.vocab_size, **MODEL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    writer = SummaryWriter(
        Path(args.out).parent / "reference-tb"
    )  # inside launch()'s temporary folder
    counter = iter(range(10**9))
    batches = reference_batches(
        smiles, labels, tokenizer, batch_size=args.batch_size, num_workers=2
    )

    def run(steps):
        loss, samples, tokens = 0.0, 0, 0
        for _, batch in zip(range(steps), batches):
            loss = loss + reference_step(model, optimizer, batch, writer, next(counter))
            samples, tokens = samples + len(batch[2]), tokens + int(batch[1].sum())
        float(loss)  # the one host sync: the device must finish before the clock stops
        return samples, tokens

    return -(-len(smiles) // args.batch_size), run


def peak_memory_mb(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


# ---------------------------------------------------------------- driver side
def launch(args, dataset, procs, threads, loop="partorch", batch_size=None):
    """One torchrun job; its result as a dict (with the configuration added)."""
    reference = loop == "tutorial"
    path, smiles_column, label_column = dataset
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={procs}",
            __file__,
            "--worker",
            "--dataset",
            path,
            "--smiles-column",
            smiles_column,
            "--label-column",
            label_column,
            "--threads",
            str(threads),
            "--out",
            str(out),
            "--steps",
            str(args.reference_steps if reference else args.steps),
            "--warmup",
            str(1 if reference else args.warmup),
            "--batch-size",
            str(batch_size or args.batch_size),
            "--amp",
            args.amp,
            "--loop",
            loop,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        run_job(command, env)
        result = json.loads(out.read_text())
    result.update(
        dataset=Path(path).name,
        procs=procs,
        threads=threads,
        loop=loop,
        global_batch=batch_size or args.batch_size,
    )
    result["samples_per_second"] = result["samples"] / result["seconds"]
    result["tokens_per_second"] = result["tokens"] / result["seconds"]
    result["flops_per_second"] = lstm_training_flops(result["tokens"], **MODEL) / result["seconds"]
    result["epoch_seconds"] = result["seconds"] / result["steps"] * result["steps_per_epoch"]
    print(
        f"{result['dataset']:>9} {loop:>14} {procs} proc x {threads} thr: "
        f"batch {result['global_batch']}: {result['samples_per_second']:8.1f} samples/s",
        flush=True,
    )
    return result


def run_job(command, env):
    """Run one torchrun job; a failure stops the benchmark with the job's log."""
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        # the workers' own lines come first, torchrun's report last: show both ends
        log = (
            done.stderr
            if len(done.stderr) < 5000
            else f"{done.stderr[:3000]}\n[...]\n{done.stderr[-2000:]}"
        )
        raise SystemExit(f"error: benchmark job failed ({' '.join(command[3:6])}):\n{log}")


def against_lightning(args, dataset, procs):
    """Lightning's DDP (benchmarks/lightning_reference.py) and partorch's DDP
    script: same model, split, global batch, epochs and processes of one thread."""
    path, smiles_column, label_column = dataset
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = [
        path,
        "--smiles-column",
        smiles_column,
        "--label-column",
        label_column,
        "--epochs",
        str(args.lightning_epochs),
        "--batch-size",
        str(args.batch_size),
    ]
    # Lightning's module is RNNPredictor at its class defaults, MODEL's sizes: the script is given
    # them, as its own defaults are the smaller quick network
    sizes = [
        text
        for name in ("embedding_dim", "d_model", "num_layers")
        for text in (f"--{name.replace('_', '-')}", str(MODEL[name]))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        run_job(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "lightning_reference.py"),
                *common,
                "--devices",
                str(procs),
                "--out",
                f"{tmp}/lightning.json",
                "--work-dir",
                f"{tmp}/lightning",
            ],
            env,
        )
        lightning = json.loads(Path(tmp, "lightning.json").read_text())
        run_job(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={procs}",
                str(ROOT / "scripts" / "basic_neural_network_ddp.py"),
                *common,
                *sizes,
                "--patience",
                "0",
                "--quiet",
                "--output-dir",
                f"{tmp}/partorch",
            ],
            env,
        )
        metrics = json.loads(Path(tmp, "partorch", "metrics.json").read_text())
    train = training_molecules(dataset)
    seconds = itertools.accumulate(train / row["samples_per_second"] for row in metrics["history"])
    partorch = dict(
        samples_per_second=metrics["train_samples_per_second"],
        test_roc_auc=metrics["test_roc_auc"],
        dev_curve=[(s, row["dev_roc_auc"]) for s, row in zip(seconds, metrics["history"])],
    )
    for name, figures in (("Lightning", lightning), ("partorch", partorch)):
        print(
            f"{Path(path).name:>9} {name:>14} {procs} proc x 1 thr: "
            f"{figures['samples_per_second']:8.1f} samples/s,"
            f" test ROC AUC {figures['test_roc_auc']:.4f} after {args.lightning_epochs} epochs",
            flush=True,
        )
    return dict(
        dataset=Path(path).name,
        procs=procs,
        epochs=args.lightning_epochs,
        lightning=lightning,
        partorch=partorch,
    )


def training_molecules(dataset):
    """Training molecules of the scripts' default split (stratified, seed 1729)."""
    from partorch import read_molecule_csv, split_indices

    path, smiles_column, label_column = dataset
    labels = read_molecule_csv(ROOT / path, smiles_column, [label_column]).labels[:, 0]
    return len(split_indices(len(labels), 1729, classes=labels.astype(int)).train)


def configurations(max_procs, cores, batch_size):
    """(loop, procs, threads, global batch): all cores in one process, then
    1..N processes of one thread at the same global batch (strong scaling),
    and at N times the batch, so each process keeps the batch of one (weak
    scaling); the layer-by-layer LSTM path every batch took before the fused
    call; and the controls."""
    configs = [("partorch", 1, cores, batch_size)] if cores > 1 else []
    configs += [("partorch", p, 1, batch_size) for p in range(1, max_procs + 1)]
    configs += [("partorch", p, 1, batch_size * p) for p in range(2, max_procs + 1)]
    configs += [("layer-by-layer", max_procs, 1, batch_size)]
    # N processes training alone at once, each on its shard at the batch one DDP process gets: what
    # DDP itself costs, with the cores, caches and memory bus as busy as in the DDP row
    configs += [("independent", p, 1, batch_size) for p in range(2, max_procs + 1)]
    # one process at the per-process batch of p processes, alone on the machine
    return configs + [
        ("partorch", 1, 1, batch_size // p) for p in range(2, max_procs + 1) if batch_size // p > 0
    ]


def markdown_report(results, peaks, args, command):
    cores = os.cpu_count()
    lines = [
        "# Training throughput",
        "",
        f"Machine: {cpu_description()}, {cores} cores, "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'};"
        f" torch {torch.__version__}, Python {platform.python_version()}.",
        "",
        f"Command: `{command}`",
        "",
        "Model: 3-layer bidirectional LSTM, embedding 128, hidden 128. partorch: global batch "
        f"{args.batch_size}, length-bucketed, {args.steps} timed steps after {args.warmup} "
        "warm-up steps. Tutorial reference: batches of "
        f"{args.reference_batch_size}, packed sequences, 2 DataLoader workers re-spawned every "
        f"epoch, `loss.item()` and a TensorBoard write every step, {args.reference_steps} timed "
        "steps.",
        "Loops: `partorch` is the DDP script's own train_one_epoch; `layer-by-layer` the same with "
        "every batch on the padded path (what every batch took before the fused call); "
        "`independent` the same processes training alone at once, with no DDP wrapper and no "
        "gradient exchange (the control for DDP's cost).",
        "",
        "Float32 matmul peak measured in this run: "
        + ", ".join(
            f"{t} thread{'s' if t > 1 else ''}: {p / 1e9:.1f} GFLOP/s"
            for t, p in sorted(peaks.items())
        )
        + ".",
        "MFU = model FLOP/s (matmul FLOPs of the LSTM on real tokens, x3 for training) / the peak "
        "of the cores the configuration uses.",
        "",
        "| data | loop | processes x threads | global batch | samples/s | tokens/s | GFLOP/s "
        "| MFU | epoch (s) | peak MB / process | vs 1 process x 1 thread |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = next(
            (
                b
                for b in results
                if b["dataset"] == r["dataset"]
                and b["loop"] == "partorch"
                and b["procs"] == 1
                and b["threads"] == 1
                and b["global_batch"] == args.batch_size
            ),
            r,
        )
        used = min(r["procs"] * r["threads"], cores)
        peak = peaks.get(used) or peaks[max(peaks)]
        lines.append(
            f"| {r['dataset']} | {r['loop']} | {r['procs']} x {r['threads']} "
            f"| {r['global_batch']} "
            f"| {r['samples_per_second']:.1f} | {r['tokens_per_second']:.0f} "
            f"| {r['flops_per_second'] / 1e9:.2f} "
            f"| {100 * r['flops_per_second'] / peak:.0f} % | {r['epoch_seconds']:.1f} "
            f"| {', '.join(f'{m:.0f}' for m in r['peak_memory_mb'])} "
            f"| {r['samples_per_second'] / base['samples_per_second']:.2f}x |"
        )
    return "\n".join(lines + scaling_notes(results, args.batch_size)) + "\n"


def scaling_notes(results, batch_size):
    """What DDP itself costs: p DDP processes against p processes training
    alone at the same time, and against p times one process alone on the
    machine, all at the per-process batch of the DDP row."""
    notes = []
    for r in results:
        if r["loop"] != "partorch" or r["procs"] == 1 or r["global_batch"] != batch_size:
            continue

        def same(a, loop, procs, r=r):
            return (
                a["dataset"] == r["dataset"]
                and a["loop"] == loop
                and a["procs"] == procs
                and a["threads"] == 1
                and a["global_batch"] == batch_size // r["procs"] * procs
            )

        control = next((a for a in results if same(a, "independent", r["procs"])), None)
        alone = next((a for a in results if same(a, "partorch", 1)), None)
        if control:
            notes.append(
                f"- {r['dataset']}: {r['procs']} DDP processes at global batch {batch_size} run "
                f"{r['samples_per_second']:.1f} samples/s, "
                f"{100 * r['samples_per_second'] / control['samples_per_second']:.0f} % of "
                f"{r['procs']} independent processes at batch {batch_size // r['procs']} each "
                f"running at once ({control['samples_per_second']:.1f})."
            )
        if alone:
            ideal = r["procs"] * alone["samples_per_second"]
            notes.append(
                f"- {r['dataset']}: the same is {100 * r['samples_per_second'] / ideal:.0f} % of "
                f"{r['procs']} x one process at batch {alone['global_batch']} alone on the machine "
                f"({ideal:.1f})."
            )
    return ["", "Where strong scaling goes:", *notes] if notes else []


def seconds_to(curve, target):
    """Training seconds until dev ROC AUC first reached `target`, or None."""
    return next((seconds for seconds, score in curve if score >= target), None)


def lightning_report(comparison, results, batch_size, target=0.90):
    if comparison is None:
        return ""
    name, procs, epochs = comparison["dataset"], comparison["procs"], comparison["epochs"]
    lines = [
        "",
        f"## Against PyTorch Lightning and the tutorial's loop ({name})",
        "",
        f"Whole epochs: {epochs} of each, {procs} processes x 1 thread, global batch {batch_size}, "
        "the benchmark's model (3 LSTM layers of 128), split (stratified, seed 1729) and AdamW; "
        "test ROC AUC of the best dev "
        "epoch. Lightning as its documentation shows DDP: a LightningModule, plain `DataLoader`s "
        '(random batches, each molecule tokenized when read), `Trainer(strategy="ddp")` '
        "(`benchmarks/lightning_reference.py`).",
        "",
        f"| loop | training samples/s | test ROC AUC | training s to dev ROC AUC {target:.2f} "
        "| vs Lightning |",
        "|---|---|---|---|---|",
    ]
    base = comparison["lightning"]["samples_per_second"]
    for loop in ("lightning", "partorch"):
        figures = comparison[loop]
        reached = seconds_to(figures["dev_curve"], target)
        who = (
            "PyTorch Lightning" if loop == "lightning" else "partorch (basic_neural_network_ddp.py)"
        )
        lines.append(
            f"| {who} "
            f"| {figures['samples_per_second']:.1f} | {figures['test_roc_auc']:.3f} "
            f"| {'not reached' if reached is None else f'{reached:.0f}'} "
            f"| {figures['samples_per_second'] / base:.2f}x |"
        )
    tutorial = next((r for r in results if r["loop"] == "tutorial" and r["dataset"] == name), None)
    ours = next(
        (
            r
            for r in results
            if r["loop"] == "partorch"
            and r["dataset"] == name
            and r["procs"] == procs
            and r["threads"] == 1
            and r["global_batch"] == batch_size
        ),
        None,
    )
    if tutorial and ours:
        lines += [
            "",
            "The tutorial's loop (table above, 1 process x all cores) ran "
            f"{tutorial['samples_per_second']:.1f} samples/s: partorch on {procs} processes runs "
            f"{ours['samples_per_second'] / tutorial['samples_per_second']:.1f}x that.",
        ]
    return "\n".join(lines) + "\n"


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.5, 4.5))
    for name in sorted({r["dataset"] for r in results}):
        ours = [
            r
            for r in results
            if r["dataset"] == name and r["loop"] == "partorch" and r["threads"] == 1
        ]
        one = max((r for r in ours if r["procs"] == 1), key=lambda r: r["global_batch"])
        for label, keep, style in (
            ("same global batch", lambda r, one=one: r["global_batch"] == one["global_batch"], "-"),
            (
                "same batch per process",
                lambda r, one=one: r["global_batch"] == one["global_batch"] * r["procs"],
                ":",
            ),
        ):
            rows = sorted(filter(keep, ours), key=lambda r: r["procs"])
            ax.plot(
                [r["procs"] for r in rows],
                [r["samples_per_second"] for r in rows],
                marker="o",
                linestyle=style,
                label=f"{name}, {label}",
                color="C0" if name.startswith("BBBP") else "C1",
            )
        procs = sorted({r["procs"] for r in ours})
        ax.plot(
            procs,
            [one["samples_per_second"] * p for p in procs],
            linestyle="--",
            color="grey",
            alpha=0.6,
            label=f"{name}, ideal",
        )
    ax.set(
        xlabel="processes (1 thread each)",
        ylabel="training samples / s",
        title="Data-parallel scaling",
    )
    ax.set_xticks(sorted({r["procs"] for r in results}))
    ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        help=(
            "CSV files (default: dataset/BBBP.csv and dataset/HIV.csv, placed by "
            "dataset/place_data.py)"
        ),
    )
    parser.add_argument("--smiles-column", default="smiles")
    parser.add_argument("--label-column", help="label column of --datasets (default: p_np)")
    parser.add_argument(
        "--steps", type=int, default=30, help="timed steps per configuration (default: %(default)s)"
    )
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed steps first (default: %(default)s)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=64, help="global batch (default: %(default)s)"
    )
    parser.add_argument(
        "--amp",
        choices=["off", "bf16", "fp16"],
        default="off",
        help="partorch precision (default: %(default)s)",
    )
    parser.add_argument(
        "--max-procs", type=int, default=torch.cuda.device_count() or os.cpu_count()
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also time the tutorial's loop (first data set only)",
    )
    parser.add_argument(
        "--reference-steps", type=int, default=6, help="(default: %(default)s, one BBBP epoch)"
    )
    parser.add_argument("--reference-batch-size", type=int, default=256)
    parser.add_argument(
        "--lightning",
        action="store_true",
        help="also train with PyTorch Lightning's DDP and partorch's DDP script for "
        "--lightning-epochs epochs each (first data set only; needs pip install -e '.[bench]')",
    )
    parser.add_argument("--lightning-epochs", type=int, default=5, help="(default: %(default)s)")
    parser.add_argument(
        "--output-dir",
        default="docs",
        help="where benchmarks.md, the plot and large_data.md go (default: %(default)s)",
    )
    # the worker side, launched by torchrun
    for flag in ("--dataset", "--out"):
        parser.add_argument(flag, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", default="partorch", help=argparse.SUPPRESS)
    import large_data  # beside this script (its folder is on sys.path)

    large_data.add_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.large:  # alone, only this; with --datasets, --reference or --lightning, those too
        large_data.run(args, "python benchmarks/speed.py " + " ".join(sys.argv[1:]))
        if not (args.datasets or args.reference or args.lightning):
            return
    datasets = (
        [(d, args.smiles_column, args.label_column or "p_np") for d in args.datasets]
        if args.datasets
        else DEFAULT_DATASETS
    )
    for path, _, _ in datasets:  # before minutes of measuring, not after
        if not (ROOT / path).is_file():
            raise SystemExit(
                f"error: {path}: no such file (python dataset/place_data.py HIV places HIV)"
            )
    if args.lightning and importlib.util.find_spec("lightning") is None:
        raise SystemExit("error: --lightning needs PyTorch Lightning: pip install -e '.[bench]'")
    cores = os.cpu_count()
    peaks = {t: matmul_peak(t) for t in sorted({1, cores})}
    results = []
    if args.reference:
        results.append(
            launch(
                args, datasets[0], 1, cores, loop="tutorial", batch_size=args.reference_batch_size
            )
        )
    for dataset in datasets:
        results += [
            launch(args, dataset, p, t, loop, batch_size=b)
            for loop, p, t, b in configurations(args.max_procs, cores, args.batch_size)
        ]
    lightning = against_lightning(args, datasets[0], args.max_procs) if args.lightning else None
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/speed.py " + " ".join(sys.argv[1:])
    (output / "benchmarks.md").write_text(
        markdown_report(results, peaks, args, command)
        + lightning_report(lightning, results, args.batch_size)
        + "\n![scaling](benchmark_scaling.png)\n"
    )
    (output / "benchmarks.json").write_text(
        json.dumps(dict(peaks=peaks, results=results, lightning=lightning), indent=1)
    )
    plot(results, output / "benchmark_scaling.png")
    print(f"wrote {output / 'benchmarks.md'} and {output / 'benchmark_scaling.png'}")


if __name__ == "__main__":
    main()
