"""A Morgan-fingerprint MLP trained with DDP: scripts/basic_neural_network_ddp.py
adapted to other data, another model and another task, changed only in its
marked place (a test checks that the diff of the two stays inside it).

    torchrun --standalone --nproc-per-node 2 examples/fingerprint_mlp_ddp.py ESOL.csv \\
        --label-column logSolubility     # MoleculeNet's ESOL: columns smiles, logSolubility

Molecules become 2048-bit Morgan fingerprints (radius 2; RDKit), the model is
a multilayer perceptron (--d-model wide, --num-layers deep), and the task is
regression when the labels are numbers (MSE on standardised targets; RMSE,
MAE and R² in the label's units), classification when they are 0/1. The DDP
steps are those of the script it was copied from:
  1. init_process_group  2. digests  3. sharded loader, set_epoch
  4. DistributedDataParallel  5. no_sync  6. all_reduce of the loss
  7. rank-0 evaluation, TensorBoard, broadcast  8. snapshot, barrier
  9. destroy_process_group
"""
from contextlib import nullcontext  # DDP 5
from datetime import timedelta  # DDP 1
from functools import partial  # DDP 7
import os  # DDP: torchrun's environment
from pathlib import Path
import time

import numpy as np  # DDP 7
import torch
import torch.distributed as dist  # DDP
from torch.nn.parallel import DistributedDataParallel  # DDP 4
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from partorch.checkpoint import (TrainingState, capture_rng, ensure_writable_dir, load_state, new_version_dir,
                                 restore_snapshot, save_snapshot)
from partorch.distributed import assert_same_on_all_ranks, check_on_all_ranks, rendezvous, torchrun_job_key  # DDP
from partorch.distributed import Heartbeat, is_restart_of, remember_failure  # DDP
from partorch.distributed import rank_seed, set_cpu_threads
from partorch.errors import PartorchError, run_main
from partorch.errors import raise_if_failed, run_or_report  # DDP 7
from partorch.evaluation import predict
from partorch.flags import build_parser, run_hparams
from partorch.loaders import get_ddp_dataloader
from partorch.logs import add_log_file, log, setup_logging
from partorch.report import write_report

# ============================ ADAPT: your data, model and task ============================
from torch import nn

from partorch.chem import morgan_fingerprints
from partorch.datasets import FeatureDataset, TrainingData
from partorch.distributed import digest
from partorch.molecule_csv import read_molecule_csv
from partorch.splits import describe_split, split_molecules
from partorch.tasks import build_task, choose_task_kind

DEFAULT_OUTPUT_DIR = "runs/fingerprint-mlp"
FINGERPRINT = dict(radius=2, bits=2048)


def build_datasets(args):
    """Fingerprints of the molecules RDKit parses (the others are dropped,
    with a warning naming their rows), split and scored as the script does."""
    table = read_molecule_csv(args.dataset, args.smiles_column, args.label_column, strict=args.strict, parse=True,
                              smiles_form=args.smiles_form)  # either form: the same fingerprints
    kind = choose_task_kind(args.task, table)
    splits = split_molecules(table, args.split, args.seed, kind, args.split_sizes)
    task = build_task(kind, table, splits, args.class_weight)
    features = morgan_fingerprints(table.smiles, **FINGERPRINT)

    def subset(indices):  # fixed-length inputs: the sampler needs no lengths, the loader stacks them
        return FeatureDataset(features[indices], table.labels[indices])

    return TrainingData(subset(splits.train), subset(splits.dev), subset(splits.test), task,
                        descriptions={"features": {"kind": "morgan", **FINGERPRINT},
                                      "splits": describe_split(table, splits, args.split, args.seed, args.split_sizes)},
                        digests={"molecules": digest([table.smiles, table.labels.tolist()]),
                                 "split": digest(splits.as_lists())},
                        warnings=table.warnings)


class FingerprintMLP(nn.Module):
    def __init__(self, inputs, hidden, layers, dropout, outputs):
        super().__init__()
        sizes = [inputs] + [hidden] * layers
        blocks = [nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)) for a, b in zip(sizes, sizes[1:])]
        self.layers = nn.Sequential(*blocks, nn.Linear(sizes[-1], outputs))

    def forward(self, fingerprints):
        return self.layers(fingerprints)


def build_model(args, data):
    """fingerprint -> [hidden] x layers -> one output per task."""
    hparams = dict(inputs=FINGERPRINT["bits"], hidden=args.d_model, layers=args.num_layers, dropout=args.dropout,
                   outputs=len(data.task.columns))
    return FingerprintMLP(**hparams), hparams
# ========================================= END ADAPT =========================================


def train_one_epoch(model, optimizer, scaler, loader, task, args, master_process):
    """One pass over this rank's shard: (mean loss, molecules) over all ranks, and every step's loss."""
    model.train()
    device = args.device
    world_size = dist.get_world_size()  # DDP
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    per_rank_batch = args.batch_size // world_size
    step_losses, step_molecules = [], []  # losses stay on the device: no host sync per step
    # disable=None: a bar on a terminal only, never redrawn into log files, SLURM's .out or CI
    bar = tqdm(total=len(loader.dataset), disable=True if args.quiet or not master_process else None, leave=False,
               unit="mol")
    for batch in loader:
        optimizer.zero_grad(set_to_none=True)
        pieces = batch.to(device).split(args.accumulate)
        step_loss = torch.zeros((), device=device)
        # DDP 5: backward() all-reduces gradients; no_sync skips that for all but the last micro-batch
        for i, piece in enumerate(pieces):
            with model.no_sync() if i < len(pieces) - 1 else nullcontext():
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss = task.loss(model(*piece.inputs).float(), piece.targets)
                # A sum divided by the per-rank batch; DDP averages over ranks: the global batch's gradient
                scaler.scale(loss / per_rank_batch).backward()
            step_loss += loss.detach()
        scaler.step(optimizer)
        scaler.update()
        step_losses.append(step_loss)
        step_molecules.append(len(batch))
        bar.update(len(batch) * world_size)
    bar.close()
    totals = torch.stack([torch.stack(step_losses), torch.tensor(step_molecules, device=device).float()])
    # DDP 6: sum over ranks, once an epoch: each logged loss covers every rank's molecules, not rank 0's share
    dist.all_reduce(totals)
    loss_sum, molecules = totals.sum(dim=1).tolist()
    return loss_sum / molecules, int(molecules), (totals[0] / totals[1]).tolist()


def evaluate(model, loader, task, args):
    """(metrics, (targets, outputs)) of one split, on the plain module (not the
    DDP wrapper, whose forward on one rank alone could wait for the others)."""
    targets, outputs = predict(model, loader, args.device, args.tta)
    if args.distributed_eval:  # DDP: each rank scored its share; every rank gets all of them
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, (targets, outputs))
        targets, outputs = (np.concatenate([p[i] for p in parts if len(p[i])]) for i in (0, 1))
    return task.metrics(targets, outputs), (targets, outputs)


def record_epoch(writer, row, task, epochs, step_losses):
    """The epoch's line on the console and its scalars in TensorBoard: the
    per-step training loss against optimizer steps, the rest against epochs."""
    score = task.score_name
    log.info("epoch %d/%d  train loss %.4f  dev loss %.4f  dev %s %.4f  %.0f samples/s", row["epoch"], epochs,
             row["train_loss"], row["dev_loss"], task.score_title, row[f"dev_{score}"], row["samples_per_second"])
    step = row["epoch"]
    for i, loss in enumerate(step_losses, start=(step - 1) * len(step_losses) + 1):
        writer.add_scalar("Loss/train_step", loss, i)
    writer.add_scalar("Loss/train", row["train_loss"], step)
    for split in [name for name in ("dev", "test") if f"{name}_loss" in row]:  # test: --test-every-epoch
        writer.add_scalar(f"Loss/{split}", row[f"{split}_loss"], step)
        writer.add_scalar(f"{task.score_tag}/{split}", row[f"{split}_{score}"], step)
        for column, value in row.get(f"{split}_per_task", {}).items():
            writer.add_scalar(f"{task.score_tag}/{split}/{column}", value, step)
    writer.add_scalar("Throughput/train_samples_per_second", row["samples_per_second"], step)
    writer.add_scalar("LR", row["lr"], step)


def main(args):
    started = time.perf_counter()
    # DDP 1: join the process group. torchrun starts one process per CPU share or GPU and sets
    # RANK, LOCAL_RANK, WORLD_SIZE and MASTER_ADDR/MASTER_PORT, which init_process_group reads.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # where this rank computes; kept with the flags, which every function below receives
    args.device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if args.amp == "fp16" and args.device.type != "cuda":
        raise PartorchError("--amp fp16 needs a CUDA GPU; on CPU use --amp bf16")
    if args.device.type == "cuda":
        torch.cuda.set_device(args.device)  # one GPU per local rank
    timeout = timedelta(seconds=args.dist_timeout)  # a dead or silent peer fails a collective after this
    dist.init_process_group("nccl" if args.device.type == "cuda" else "gloo", timeout=timeout,
                            device_id=args.device if args.device.type == "cuda" else None, **rendezvous(timeout))
    try:
        train(args, started)
    except PartorchError as exc:  # DDP: bad input; torchrun would retry it N times (--max-restarts N)
        remember_failure(exc)
        raise
    finally:
        dist.destroy_process_group()  # DDP 9: on every way out, errors included


def load_data(args, rank, world_size):
    """The datasets, and this rank's loaders."""
    data = build_datasets(args)  # no collective inside: bad input stops every rank alike
    for warning in data.warnings if rank == 0 else []:
        log.warning("warning: %s", warning)
    # DDP 2: a stale copy of the file on one node would otherwise train without a word
    assert_same_on_all_ranks(data.digests)
    # DDP 3: every rank draws the same global batches and keeps its slice
    train_loader = get_ddp_dataloader(rank=rank, world_size=world_size, dataset=data.train,
                                      batch_size=args.batch_size, shuffle=True, seed=args.seed,
                                      num_workers=args.num_workers, sampler=args.sampler)
    # DDP 7: rank 0 scores dev and test alone, unless --distributed-eval shares them out
    eval_rank, eval_world_size = (rank, world_size) if args.distributed_eval else (0, 1)
    dev_loader, test_loader = (get_ddp_dataloader(rank=eval_rank, world_size=eval_world_size, dataset=split,
                                                  batch_size=args.batch_size, num_workers=args.num_workers)
                               for split in (data.dev, data.test))
    return data, train_loader, dev_loader, test_loader


def prepare_output_dir(args, rank):
    """The output folder and this rank's log file in it, before any training."""
    if args.output_dir is None:
        # DDP: rank 0 picks DEFAULT_OUTPUT_DIR/version_N (its own again after a torchrun restart) for all
        pick = [run_or_report(lambda: new_version_dir(DEFAULT_OUTPUT_DIR, torchrun_job_key())) if rank == 0 else None]
        dist.broadcast_object_list(pick, src=0)
        args.output_dir = str(raise_if_failed(pick[0]))
    output = Path(args.output_dir)
    # DDP: rank 0 creates the folder, local rank 0 of each node its logs/; all learn if that failed
    check_on_all_ranks(lambda: ensure_writable_dir(output) if rank == 0 else None)
    check_on_all_ranks(lambda: ensure_writable_dir(output / "logs") if int(os.environ.get("LOCAL_RANK", 0)) == 0
                       else None)
    add_log_file(output / "logs", rank)
    return output


def resume(args, path, model, optimizer, scaler, identity, rank):
    """The training state to start from: a snapshot of this run, or a fresh one (None)."""
    if args.resume and not path.exists():
        raise PartorchError(f"--resume: there is no snapshot at {path}")
    if not path.exists():
        return None
    snapshot = load_state(path)
    # DDP: a job that torchrun restarted (a worker died, a node left) resumes its own snapshot on every node
    if not (args.resume or is_restart_of(snapshot.get("state", {}).get("job"))):  # never mix two runs
        raise PartorchError(f"{path.parent.parent} holds an earlier run (its snapshot {path}): continue it with "
                            "--resume, or choose another --output-dir")
    state = restore_snapshot(snapshot, model=model, optimizer=optimizer, scaler=scaler, identity=identity, rank=rank,
                             world_size=dist.get_world_size())  # DDP: each rank its own random state
    log.info("resumed from the snapshot after epoch %d (best dev score %.4f at epoch %d)", state.epoch,
             state.best_score, state.best_epoch)
    return state


def score_epoch(args, model, loaders, task, writer, figures, step_losses):
    """The epoch's figures on every rank: `figures` (epoch, training) with dev's scores (and test's) added."""
    row = None
    if writer is not None or args.distributed_eval:
        dev_loader, test_loader = loaders
        row = {**figures, **task.figures("dev", evaluate(model, dev_loader, task, args)[0])}
        if args.test_every_epoch:  # for the curves only: dev alone picks the best epoch
            row.update(task.figures("test", evaluate(model, test_loader, task, args)[0]))
    if writer is not None:
        record_epoch(writer, row, task, args.epochs, step_losses)
    return row


# DDP 8: every rank's random state (their dropout masks differ), rank 0 writes, and the
# barrier keeps any rank from running ahead of a snapshot that is not yet on disk
def save_snapshot_of_all_ranks(path, model, optimizer, scaler, state, identity):
    rng_states = [None] * dist.get_world_size()
    dist.all_gather_object(rng_states, capture_rng())
    # the barrier: every rank waits here for rank 0's write, and learns whether it worked
    check_on_all_ranks(lambda: save_snapshot(path, model=model, optimizer=optimizer, scaler=scaler, state=state,
                                             rng_states=rng_states, identity=identity) if dist.get_rank() == 0
                       else None)


def train(args, started):
    rank, world_size = dist.get_rank(), dist.get_world_size()  # DDP
    master_process = rank == 0  # it alone prints, evaluates and writes files
    setup_logging(rank, args.quiet)
    set_cpu_threads(int(os.environ.get("LOCAL_WORLD_SIZE", 1)), args.threads)  # DDP: share this host's cores
    dist.barrier()  # DDP: all have joined before any may leave (on bad input, say)
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    data, train_loader, dev_loader, test_loader = load_data(args, rank, world_size)
    output = prepare_output_dir(args, rank)
    task = data.task
    log.info("%s: train %d, dev %d, test %d molecules; %s on %d label columns; rank %d of %d, %s; writing to %s",
             args.dataset, len(data.train), len(data.dev), len(data.test), task.kind, len(task.columns), rank,
             world_size, args.device, output)

    model, model_hparams = build_model(args, data)
    model = model.to(args.device)
    # DDP 4: the wrapper copies rank 0's weights to every rank and all-reduces gradients in backward()
    ddp_model = DistributedDataParallel(model, device_ids=[args.device] if args.device.type == "cuda" else None,
                                        gradient_as_bucket_view=True, bucket_cap_mb=args.bucket_mb)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    torch.manual_seed(rank_seed(args.seed, rank))  # dropout from (seed, rank): each DDP rank its own masks
    scaler = torch.amp.GradScaler(enabled=args.amp == "fp16")
    writer = SummaryWriter(output) if master_process else None  # DDP 7: one writer for the whole job
    # DDP 7: while rank 0 scores alone, the others wait on its heartbeat, not in a collective: scoring a
    # large split may outlast --dist-timeout, which stays the bound for a rank 0 that is really gone
    heartbeat = Heartbeat(timedelta(seconds=args.dist_timeout), enabled=not args.distributed_eval)
    hparams = {**run_hparams(args), "model": model_hparams}
    identity = {"hparams": hparams, **data.digests}
    snapshot_path = output / "checkpoints" / "last.pt"
    state = resume(args, snapshot_path, model, optimizer, scaler, identity, rank)
    state = state or TrainingState(best_score=task.worst_score)
    started -= state.seconds  # a resumed run's clock goes on from its snapshot's
    state.job = torchrun_job_key()  # DDP: the snapshot names the job writing it, which its restarts resume
    # DDP: all ranks start from the same epoch (a node whose output folder lacks the snapshot would not)
    assert_same_on_all_ranks({"epoch to resume after": str(state.epoch)})

    train_seconds, train_molecules = 0.0, 0
    for epoch in range(state.epoch + 1, args.epochs + 1):
        if args.patience and state.epoch - state.best_epoch >= args.patience:
            log.info("no better dev score for %d epochs: stopped after epoch %d", args.patience, state.epoch)
            break
        # DDP 3: the shuffle depends on (seed, epoch), the same on every rank; without set_epoch
        # every epoch would replay the first one's order
        train_loader.batch_sampler.set_epoch(epoch)
        if args.augment:
            train_loader.dataset.set_epoch(epoch)  # fresh random SMILES
        epoch_started = time.perf_counter()
        train_loss, molecules, step_losses = train_one_epoch(ddp_model, optimizer, scaler, train_loader, task,
                                                             args, master_process)
        seconds = time.perf_counter() - epoch_started
        train_seconds, train_molecules = train_seconds + seconds, train_molecules + molecules
        figures = dict(epoch=epoch, train_loss=train_loss, samples_per_second=molecules / seconds,
                       lr=optimizer.param_groups[0]["lr"])
        # DDP 7: only rank 0 scores dev; it sends the epoch's figures (or why it failed) to every rank,
        # so all keep the same best weights, stop at the same epoch, or stop together
        scoring = partial(score_epoch, args, model, (dev_loader, test_loader), task, writer, figures, step_losses)
        shared = [heartbeat.while_rank0_works(partial(run_or_report, scoring))]
        dist.broadcast_object_list(shared, src=0)
        row = raise_if_failed(shared[0])
        state.history.append(row)
        state.epoch = epoch
        if task.is_better(row[f"dev_{task.score_name}"], state.best_score):
            state.best_score, state.best_epoch = row[f"dev_{task.score_name}"], epoch
            state.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        state.seconds = time.perf_counter() - started
        save_snapshot_of_all_ranks(snapshot_path, model, optimizer, scaler, state, identity)

    if not state.best_state:
        raise PartorchError(f"no epoch gave a finite dev {task.score_title}; see {output / 'logs'}")
    model.load_state_dict(state.best_state)
    if master_process or args.distributed_eval:
        _, test = evaluate(model, test_loader, task, args)
    if master_process:
        run = dict(world_size=world_size, global_batch_size=args.batch_size,
                   per_rank_batch_size=args.batch_size // world_size,
                   train_samples_per_second=train_molecules / max(train_seconds, 1e-9),
                   wall_seconds=time.perf_counter() - started, seed=args.seed, max_epochs=args.epochs,
                   patience=args.patience)
        final = write_report(output, writer=writer, task=task, state=state, test=test, run=run,
                             descriptions={"hparams": hparams, "task": task.to_dict(), **data.descriptions})
        print(task.final_line(final), flush=True)


if __name__ == "__main__":
    run_main(main, build_parser(__doc__, DEFAULT_OUTPUT_DIR))
