"""Train a SMILES recurrent network in one process, the whole loop in view.

    python scripts/basic_neural_network.py dataset/BBBP.csv
    python scripts/basic_neural_network.py my.csv --label-column y1,y2 --task regression

Its twin, scripts/basic_neural_network_ddp.py, runs the same program under
torchrun with DistributedDataParallel. The two are duplicated on purpose (as
in pytorch/examples' DDP series): `diff` them and every difference is a DDP
step, marked `# DDP n` there. `rank` is always 0 and `master_process` always
true here; they stay so that the twins differ only where DDP does.
Your own data, model or task: edit the ADAPT block and nothing else.
"""

import time

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from partorch import FlagParser, capture_rng, get_dataloader, predict, prepare_run_dir
from partorch import resume_or_start, run_main, save_snapshot, score, set_cpu_threads
from partorch import optimization, setup_logging, write_report

DEFAULT_OUTPUT_DIR = "runs/basic"
# How or where a run executes, not what it computes: a snapshot may go on with other values
RUN_ONLY = {"output_dir", "num_workers", "threads", "quiet", "resume", "epochs", "patience"}
RUN_ONLY |= {"test_every_epoch", "dist_timeout"}

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
    distributed("--dist-timeout", type=positive_int, default=300, help="unused: no peers here")
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
    world_size = 1
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    steps, norms = [], []  # each step's (loss, molecules) and gradient norm, left on the device
    # disable=None: a bar on a terminal only, never redrawn into log files, SLURM's .out or CI
    bar = tqdm(total=len(loader.dataset), unit="mol", disable=quiet or None)
    for batch in loader:
        optimizer.zero_grad(set_to_none=True)
        pieces = batch.to(device).split(args.accumulate)
        step_loss = torch.zeros((), device=device)
        for piece in pieces:
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                loss = task.loss(model(*piece.inputs).float(), piece.targets)
            # the batch's mean loss (a sum / the batch)
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
    loss_sum, molecules = totals.sum(dim=1).tolist()
    seconds = time.perf_counter() - started
    row = dict(train_loss=loss_sum / molecules, molecules=int(molecules), seconds=seconds,
               samples_per_second=molecules / seconds, **optimization.figures(optimizer, norms))
    return row, (totals[0] / totals[1]).tolist()


def main(args):
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    train(args, device)


def train(args, device):
    started = time.perf_counter()
    rank, world_size = 0, 1
    master_process = rank == 0  # it alone prints, evaluates and writes files
    log = setup_logging(rank, args.quiet)  # rank 0 on the console, each rank to its file
    set_cpu_threads(1, args.threads)
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    data = build_data(args)  # the same on every rank: same file, flags and seed
    task = data.task
    for warning in data.warnings if master_process else []:
        log.warning("warning: %s", warning)
    train_loader = get_dataloader(data.train, shuffle=True, batch_size=args.batch_size,
                                  seed=args.seed, num_workers=args.num_workers,
                                  sampler=args.sampler)
    loaders = {name: get_dataloader(split, batch_size=args.batch_size)
               for name, split in (("dev", data.dev), ("test", data.test))}
    scored = {k: v for k, v in loaders.items() if k == "dev" or args.test_every_epoch}
    output = prepare_run_dir(args.output_dir, DEFAULT_OUTPUT_DIR, args.resume, config=args)
    log.info("%s, %d label columns; rank %d of %d", task.kind, len(task.columns), rank, world_size)
    model, model_hparams = build_model(args, data, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scheduler = optimization.lr_schedule(optimizer, args, steps_per_epoch=len(train_loader))
    torch.manual_seed(args.seed * 100_003 + rank)  # dropout: (seed, rank), each rank its masks
    scaler = torch.amp.GradScaler(enabled=args.amp == "fp16")
    writer = SummaryWriter(output)
    hparams = {**{k: v for k, v in vars(args).items() if k not in RUN_ONLY}, "model": model_hparams}
    snapshot = output / "checkpoints" / "last.pt"
    parts = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                 identity={"hparams": hparams, **data.digests})
    state = resume_or_start(snapshot, resume=args.resume, worst_score=task.worst_score, rank=rank,
                            world_size=world_size, **parts)
    started -= state.seconds  # a resumed run's clock goes on from its snapshot's
    for epoch in range(state.epoch + 1, args.epochs + 1):
        if state.patience_ran_out(args.patience):
            break
        train_loader.sampler.set_epoch(epoch)  # a fresh order (and --augment SMILES) each epoch
        row, step_losses = train_one_epoch(model, optimizer, scheduler, scaler, train_loader,
                                           task, args, device, args.quiet or not master_process)
        row["epoch"] = epoch
        scores = [score(model, scored, task, device, data.tta) if master_process else None]
        row.update(scores[0])
        if master_process:
            log.info("epoch %d/%d  train loss %.4f  dev loss %.4f  dev %s %.4f", epoch, args.epochs,
                     row["train_loss"], row["dev_loss"], task.score_title,
                     row[f"dev_{task.score_name}"])
            for i, loss in enumerate(step_losses, start=(epoch - 1) * len(step_losses) + 1):
                writer.add_scalar("Loss/train_step", loss, i)  # every optimizer step
            for tag, value in task.scalars(row).items():
                writer.add_scalar(tag, value, epoch)
        state.end_epoch(row, model, task, seconds=time.perf_counter() - started)  # keeps the best
        rng_states = [capture_rng()]
        if master_process:
            save_snapshot(snapshot, state=state, rng_states=rng_states, **parts)

    model.load_state_dict(state.best_weights())
    if master_process:
        run = dict(world_size=world_size, global_batch_size=args.batch_size, seed=args.seed,
                   per_rank_batch_size=args.batch_size // world_size, max_epochs=args.epochs,
                   wall_seconds=time.perf_counter() - started, patience=args.patience)
        final = write_report(output, writer=writer, task=task, state=state, run=run,
                             test=predict(model, loaders["test"], device, data.tta),
                             descriptions={"hparams": hparams, **data.descriptions})
        print(task.final_line(final), flush=True)


if __name__ == "__main__":
    run_main(main, build_parser())
