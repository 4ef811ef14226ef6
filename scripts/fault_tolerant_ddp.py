"""Train a SMILES recurrent network with DDP, for long jobs across nodes.

    torchrun --nnodes 2 --nproc-per-node 4 --max-restarts 3 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 --rdzv-id JOB scripts/fault_tolerant_ddp.py dataset/BBBP.csv

This is scripts/basic_neural_network_ddp.py plus what a long multi-node job
needs, every added line marked `# FT n` (`diff` the two):
  1. bad input is remembered in torchrun's store, so the job's restarts stop at once
  2. all ranks resume the same epoch (a node whose folder lacks the snapshot would not)
  3. every rank checks that all have the same flags, molecules, split and vocabulary
  4. rank 0 may score dev for longer than --dist-timeout (up to --eval-timeout): the others
     wait on its heartbeat
  5. a failure on one rank (scoring, writing a snapshot) reaches every rank as one line
  6. --distributed-eval: every rank scores a share of dev and test
  7. SIGTERM (a preempted or timed-out job): every rank stops after the same step and the
     snapshot is written there; the same command with --resume auto continues from it
"""

from contextlib import nullcontext  # DDP 4
from datetime import timedelta  # DDP 1
from functools import partial  # FT 4
import os  # DDP 1
import time

import numpy as np  # FT 6
import torch
import torch.distributed as dist  # DDP 1
from torch.nn.parallel import DistributedDataParallel  # DDP 3
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from partorch import FlagParser, capture_rng, get_ddp_dataloader, predict, prepare_run_dir
from partorch import resume_or_start, run_main, save_snapshot, score, set_cpu_threads
from partorch import optimization, setup_logging, write_report
from partorch import rendezvous  # DDP 1
from partorch.ddp.distributed import Heartbeat, assert_same_on_all_ranks, check_on_all_ranks  # FT
from partorch.ddp.distributed import remember_failure  # FT 1
from partorch.ddp.flags import flag_values  # FT 3
from partorch.ddp.errors import PartorchError, raise_if_failed, run_or_report  # FT 1
from partorch.ddp.preemption import Preemption  # FT 7

DEFAULT_OUTPUT_DIR = "runs/ft"  # FT: its own runs/ft/version_N
# How or where a run executes, not what it computes: a snapshot may go on with other values
RUN_ONLY = {"output_dir", "num_workers", "threads", "quiet", "resume", "epochs", "patience"}
RUN_ONLY |= {"test_every_epoch", "dist_timeout", "bucket_mb"}  # DDP 1
RUN_ONLY |= {"eval_timeout"}  # FT 4
RUN_ONLY |= {"distributed_eval"}  # FT 6
# FT 3: what may differ between nodes (paths, cores)
PER_NODE = {"dataset", "output_dir", "threads", "num_workers"}

# ============================ ADAPT: your data, model and task ============================
from partorch import molecules  # noqa: E402  (the SMILES parts: replace them with yours)

add_data_and_model_flags = molecules.add_molecule_flags  # (data group, model group): your flags
PRESETS = molecules.PRESETS  # named sets of your flags' values (--preset NAME, listed in --help)


def build_data(args):
    """Your data and its task, as a partorch.TrainingData (datasets, task, what to save)."""
    # the options are the flags add_data_and_model_flags added, and --seed
    return molecules.molecule_data(args.dataset, **molecules.molecule_data_options(args))


def build_model(args, data, device):
    """Your model (forward: a batch's inputs -> [batch, tasks]) and its arguments, saved."""
    molecules.RNNPredictor.check_amp(args.amp, device)
    hparams = dict(vocab_size=data.train.tokenizer.vocab_size, embedding_dim=args.embedding_dim,
                   d_model=args.d_model, num_layers=args.num_layers, dropout=args.dropout,
                   bidirectional=args.bidirectional, num_outputs=len(data.task.output_columns),
                   extra_features=data.train.feature_count,
                   feature_dropout=args.feature_dropout, head_size=args.head_size)
    return molecules.rnn_predictor(hparams, data.train.tokenizer, args.init_from, device)
# ========================================= END ADAPT =========================================


def build_parser():
    parser = FlagParser(__doc__, presets=PRESETS)  # --preset NAME: a set of flag values
    groups = map(parser.add_argument_group, ("data", "model", "training", "distributed", "output"))
    data, model, training, distributed, output = groups
    add_data_and_model_flags(data, model)
    positive_int, count, add = FlagParser.positive(int), FlagParser.count, training.add_argument
    add("--epochs", type=positive_int, default=30, help="maximum epochs")
    add("--patience", type=count, default=10, help="epochs without a better dev score; 0: no limit")
    add("--batch-size", type=positive_int, default=64, help="the GLOBAL batch, over all ranks")
    optimization.add_flags(training)  # --lr, --weight-decay, a schedule, clipping
    add("--accumulate", type=positive_int, default=1, help="micro-batches per optimizer step")
    add("--amp", choices=["off", "bf16", "fp16"], default="off", help="mixed precision")
    add("--random-seed", "--seed", dest="seed", type=count, default=1729, help="seed of it all")
    add("--sampler", choices=["bucket", "random"], default="bucket", help="batches by length")
    add("--num-workers", type=count, default=0, help="DataLoader worker processes")
    add("--threads", type=positive_int, help="CPU threads (default: cores / local processes)")
    distributed = distributed.add_argument
    distributed("--dist-timeout", type=positive_int, default=300, help="peer wait, s")  # DDP 1
    distributed("--bucket-mb", type=positive_int, default=25, help="gradient bucket MB")  # DDP 3
    distributed("--eval-timeout", type=positive_int, metavar="S",  # FT 4
                help="most seconds rank 0 may score (default 10 x --dist-timeout + 10 ms/molecule)")
    distributed("--distributed-eval", action="store_true",  # FT 6
                help="every rank scores a share of dev and test")
    add = output.add_argument
    add("--output-dir", help=f"the run's folder (default: a new {DEFAULT_OUTPUT_DIR}/version_N)")
    add("--resume", **FlagParser.RESUME)  # [yes|auto|latest]
    add("--test-every-epoch", action="store_true", help="score test every epoch, for the curves")
    add("--quiet", action="store_true", help="no progress bar; warnings and the final line only")
    return parser


def train_one_epoch(model, optimizer, scheduler, scaler, loader, task, args, device, quiet):
    """One pass over this rank's shard: the epoch's figures over all ranks, each step's loss."""
    started = time.perf_counter()
    model.train()
    world_size = dist.get_world_size()  # DDP 5
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    steps, norms = [], []  # each step's (loss, molecules) and gradient norm, left on the device
    # disable=None: a bar on a terminal only, never redrawn into log files, SLURM's .out or CI
    bar = tqdm(total=len(loader.dataset), unit="mol", disable=quiet or None)
    for batch in loader:
        optimizer.zero_grad(set_to_none=True)
        pieces = batch.to(device).split(args.accumulate)
        step_loss = torch.zeros((), device=device)
        # DDP 4: backward() all-reduces gradients; no_sync skips that for all but the last piece
        for i, piece in enumerate(pieces):
            with model.no_sync() if i < len(pieces) - 1 else nullcontext():
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss = task.loss(model(*piece.inputs).float(), piece.targets)
                # the batch's mean loss (a sum / the batch); DDP averages the ranks' gradients
                scaler.scale(loss / (args.batch_size // world_size)).backward()
            step_loss += loss.detach()
        norms.append(optimization.clip_gradients(model, optimizer, scaler, args.clip_grad_norm))
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()  # the next step's learning rate (warmup, cosine)
        steps.append(torch.stack([step_loss, torch.full((), float(len(batch)), device=device)]))
        bar.update(len(batch) * world_size)
    bar.close()
    totals = torch.stack(steps, dim=1)
    # DDP 5: summed over ranks once an epoch, so the logged loss covers every rank's molecules
    dist.all_reduce(totals)
    loss_sum, molecules = totals.sum(dim=1).tolist()
    seconds = time.perf_counter() - started
    row = dict(train_loss=loss_sum / molecules, molecules=int(molecules), seconds=seconds,
               samples_per_second=molecules / seconds, **optimization.figures(optimizer, norms))
    return row, (totals[0] / totals[1]).tolist()


def gathered(predict_share):  # FT 6: --distributed-eval
    """Every rank's (targets, outputs) share, concatenated, on every rank; a
    rank whose share failed sends its failure instead, and all stop with it."""
    shares = [None] * dist.get_world_size()
    dist.all_gather_object(shares, run_or_report(predict_share))
    shares = [raise_if_failed(share) for share in shares]
    return tuple(np.concatenate([s[i] for s in shares if len(s[i])]) for i in (0, 1))


def snapshot_on_all_ranks(path, state, parts, master_process):  # FT 5, FT 7
    """Every rank's random state (their dropout masks differ) into the snapshot rank 0
    writes, and a barrier that also tells every rank whether that write failed."""
    rng_states = [None] * dist.get_world_size()
    dist.all_gather_object(rng_states, capture_rng())
    save = partial(save_snapshot, path, state=state, rng_states=rng_states, **parts)
    check_on_all_ranks(save if master_process else lambda: None)


def main(args):
    # DDP 1: join the group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT); rendezvous()
    # keys each restart apart in torchrun's store (none dials dead workers); plain python: one rank
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # DDP 1: one GPU per local rank
    timeout = timedelta(seconds=args.dist_timeout)  # a dead or silent peer fails a collective
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout,
                            **rendezvous(timeout))
    try:
        train(args, device)
    except PartorchError as exc:  # FT 1: bad input: torchrun would retry it --max-restarts times
        remember_failure(exc)
        raise
    finally:
        dist.destroy_process_group()  # DDP 8: on every way out, errors included


def train(args, device):
    started = time.perf_counter()
    preemption = Preemption()  # FT 7: from now on SIGTERM asks the ranks to agree on a stop
    rank, world_size = dist.get_rank(), dist.get_world_size()  # DDP 1
    master_process = rank == 0  # it alone prints, evaluates and writes files
    log = setup_logging(rank, args.quiet)  # rank 0 on the console, each rank to its file
    set_cpu_threads(int(os.environ.get("LOCAL_WORLD_SIZE", 1)), args.threads)  # DDP 1: per host
    # FT 3: a node started with other flags (an older job script) would drift apart or hang
    assert_same_on_all_ranks(flag_values(args, ignore=PER_NODE))
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    data = build_data(args)  # the same on every rank: same file, flags and seed
    task = data.task
    for warning in data.warnings if master_process else []:
        log.warning("warning: %s", warning)
    # DDP 2: every rank draws the same global batches from (seed, epoch) and keeps its slice
    train_loader = get_ddp_dataloader(data.train, rank=rank, world_size=world_size, shuffle=True,
                                      batch_size=args.batch_size, seed=args.seed,
                                      num_workers=args.num_workers, sampler=args.sampler)
    # DDP 6: rank 0 scores dev and test alone: its loaders hold the whole splits
    # FT 6: unless --distributed-eval shares them out
    shares = (rank, world_size) if args.distributed_eval else (0, 1)
    loaders = {name: get_ddp_dataloader(split, rank=shares[0], world_size=shares[1],
                                        batch_size=args.batch_size)  # FT 6
               for name, split in (("dev", data.dev), ("test", data.test))}
    scored = {k: v for k, v in loaders.items() if k == "dev" or args.test_every_epoch}
    # FT 3: a stale copy of the file on one node would otherwise train without a word
    assert_same_on_all_ranks(data.digests)
    output = prepare_run_dir(args.output_dir, DEFAULT_OUTPUT_DIR, args.resume, config=args)
    log.info("%s, %d label columns; rank %d of %d", task.kind, len(task.columns), rank, world_size)
    model, model_hparams = build_model(args, data, device)
    # DDP 3: the wrapper copies rank 0's weights to all ranks, all-reduces gradients in backward()
    device_ids = [device] if device.type == "cuda" else None
    ddp_model = DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=args.bucket_mb,
                                        gradient_as_bucket_view=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scheduler = optimization.lr_schedule(optimizer, args, steps_per_epoch=len(train_loader))
    torch.manual_seed(args.seed * 100_003 + rank)  # dropout: (seed, rank), each rank its masks
    scaler = torch.amp.GradScaler(enabled=args.amp == "fp16")
    writer = SummaryWriter(output) if master_process else None  # DDP 6: one writer for the job
    hparams = {**{k: v for k, v in vars(args).items() if k not in RUN_ONLY}, "model": model_hparams}
    snapshot = output / "checkpoints" / "last.pt"
    # DDP 7: a job that torchrun restarted (a worker died) continues from its last snapshot
    parts = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                 identity={"hparams": hparams, **data.digests})
    state = resume_or_start(snapshot, resume=args.resume, worst_score=task.worst_score, rank=rank,
                            world_size=world_size, **parts)
    started -= state.seconds  # a resumed run's clock goes on from its snapshot's
    # FT 2: all ranks start from the same epoch (a node whose folder lacks the snapshot would not)
    assert_same_on_all_ranks({"epoch to resume after": str(state.epoch),  # FT 7: and its step
                              "steps trained of the next": str(state.paused_step(state.epoch + 1))})
    # FT 4: while rank 0 scores alone, the others wait on its heartbeat, not in a collective: a
    # large split may outlast --dist-timeout, which stays the bound for a rank 0 really gone;
    # --eval-timeout, which grows with the molecules scored, for a rank 0 alive but stuck
    molecules_scored = sum(len(loader.dataset) for loader in scored.values()) * (1 + data.tta)
    ceiling = args.eval_timeout or 10 * args.dist_timeout + 0.01 * molecules_scored
    heartbeat = Heartbeat(timedelta(seconds=args.dist_timeout), timedelta(seconds=ceiling),
                          enabled=not args.distributed_eval)
    gather = gathered if args.distributed_eval else None  # FT 6
    for epoch in range(state.epoch + 1, args.epochs + 1):
        if state.patience_ran_out(args.patience):
            break
        # DDP 2: the shuffle comes from (seed, epoch), the same on every rank; without
        # set_epoch every epoch would replay the first one's order (and its --augment SMILES)
        train_loader.sampler.set_epoch(epoch, start=state.paused_step(epoch))  # FT 7
        batches = preemption.watch(train_loader, start=state.paused_step(epoch))  # FT 7
        row, step_losses = train_one_epoch(ddp_model, optimizer, scheduler, scaler, batches,  # FT 7
                                           task, args, device, args.quiet or not master_process)
        row, step_losses = state.merge_paused(row, step_losses)  # FT 7: and the steps before it
        if preemption.stopped_at:  # FT 7: every rank stopped after this step: the snapshot here
            state.pause(epoch, preemption.stopped_at, row, step_losses,
                        seconds=time.perf_counter() - started)
            snapshot_on_all_ranks(snapshot, state, parts, master_process)
            raise preemption.stop(f"at step {preemption.stopped_at} of epoch {epoch}")
        row["epoch"] = epoch
        # DDP 6: rank 0 alone scores dev, on the plain module (DDP's forward would wait for the
        # others), and sends the figures to all: all keep the same best weights and stop together
        scoring = partial(score, model, scored, task, device, data.tta, gather)  # FT 6
        # FT 5: the figures, or why rank 0 failed to get them, reach every rank
        scores = [heartbeat.while_rank0_works(partial(run_or_report, scoring))]  # FT 4
        dist.broadcast_object_list(scores, src=0)
        row.update(raise_if_failed(scores[0]))  # FT 5
        if master_process:  # DDP 6: the one TensorBoard writer
            log.info("epoch %d/%d  train loss %.4f  dev loss %.4f  dev %s %.4f", epoch, args.epochs,
                     row["train_loss"], row["dev_loss"], task.score_title,
                     row[f"dev_{task.score_name}"])
            for i, loss in enumerate(step_losses, start=(epoch - 1) * len(step_losses) + 1):
                writer.add_scalar("Loss/train_step", loss, i)  # every optimizer step
            for tag, value in task.scalars(row).items():
                writer.add_scalar(tag, value, epoch)
        state.end_epoch(row, model, task, seconds=time.perf_counter() - started)  # keeps the best
        # DDP 7: every rank's random state (their dropout masks differ), then rank 0 writes;
        # the barrier keeps any rank from running ahead of a snapshot not yet on disk
        snapshot_on_all_ranks(snapshot, state, parts, master_process)  # FT 5
        if epoch < args.epochs and preemption.agreed():  # FT 7: told to stop while dev was scored
            raise preemption.stop(f"after epoch {epoch}")

    model.load_state_dict(state.best_weights())
    if args.distributed_eval:  # FT 6: every rank scores its share of test
        test = gathered(partial(predict, model, loaders["test"], device, data.tta))
    if master_process:
        run = dict(world_size=world_size, global_batch_size=args.batch_size, seed=args.seed,
                   per_rank_batch_size=args.batch_size // world_size, max_epochs=args.epochs,
                   wall_seconds=time.perf_counter() - started, patience=args.patience)
        final = write_report(output, writer=writer, task=task, state=state, run=run,
                             test=test if args.distributed_eval else predict(  # FT 6
                                 model, loaders["test"], device, data.tta),
                             descriptions={"hparams": hparams, **data.descriptions})
        print(task.final_line(final), flush=True)


if __name__ == "__main__":
    run_main(main, build_parser())
