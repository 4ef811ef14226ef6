"""Pretrain the SMILES encoder with DDP on a large corpus, to fine-tune the classifiers from.

    python scripts/prepare_data.py dataset/MOSES_train.csv.gz --output-dir data/moses_train
    torchrun --standalone --nproc-per-node 2 scripts/pretrain_ddp.py data/moses_train \\
        --max-steps 50 --output-dir runs/pretrain/try
    torchrun --standalone --nproc-per-node 2 scripts/basic_neural_network_ddp.py \\
        dataset/BBBP.csv --init-from runs/pretrain/try

This is where data parallelism pays: a corpus of millions of molecules, each rank training on
its slice of every global batch. The corpus is prepared once (a CSV given here is prepared into
the cache, by one process per node) and every rank memory-maps it, so start-up and memory per
rank do not grow with it. Epochs are long, so the run is counted in optimizer steps: a snapshot
every --snapshot-every-steps holds the sampler's place, and a restart (torchrun's, or
--resume) continues at the same sample of the same epoch; SIGTERM (a preempted SLURM job)
stops every rank after the same step, with a snapshot there. Rank 0 alone scores a bounded
held-out sample every --eval-every-steps. The objective (--objective): masked tokens, RDKit
descriptors of each molecule from its pooled encoding (a corpus prepared with --descriptors),
or both summed; see partorch/molecules/pretraining.py. The run's folder is a model folder:
--init-from takes its embedding and LSTM (and its vocabulary) into the ladder's classifiers.
"""

from datetime import timedelta
import os
from pathlib import Path
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

from partorch import (
    DataError,
    FlagParser,
    capture_rng,
    get_ddp_dataloader,
    optimization,
    prepare_run_dir,
    rendezvous,
    resume_or_start,
    run_main,
    save_model_dir,
    save_snapshot,
    set_cpu_threads,
    setup_logging,
)
from partorch.ddp.distributed import assert_same_on_all_ranks, unique_memory_bytes
from partorch.ddp.files import atomic_write_json
from partorch.ddp.preemption import Preemption
from partorch.molecules import pretraining as mlm
from partorch.molecules.flags import add_encoder_flags
from partorch.molecules.prepared import (
    PreparedCorpus,
    PreparedDataset,
    PrepareOptions,
    ensure_prepared,
    is_prepared,
)

DEFAULT_OUTPUT_DIR = "runs/pretrain"
PREEMPTION_CHECK_EVERY_STEPS = 5
RUN_ONLY = {"output_dir", "num_workers", "threads", "quiet", "resume", "dist_timeout"}
RUN_ONLY |= {"eval_every_steps", "snapshot_every_steps", "log_every_steps"}


def build_parser():
    parser = FlagParser(__doc__)
    groups = map(parser.add_argument_group, ("data", "model", "training", "output"))
    data, model, training, output = groups
    add = data.add_argument
    add("corpus", help="a prepared folder (scripts/prepare_data.py), or a CSV to prepare")
    add("--smiles-column", default="smiles", help="with a CSV: its SMILES column")
    add("--held-out", metavar="FOLDER", help="a prepared folder in the corpus's vocabulary "
        "(prepare_data.py --vocabulary-from CORPUS --vocabulary fixed); default: a sample of "
        "--eval-molecules molecules kept out of the corpus's training")
    add("--eval-molecules", type=FlagParser.positive(int), default=2000,
        help="held-out molecules rank 0 scores (a bound on its time)")
    add_encoder_flags(model)
    add = training.add_argument
    positive_int = FlagParser.positive(int)
    add("--epochs", type=positive_int, default=1, help="passes over the corpus")
    add("--max-steps", type=FlagParser.count, default=0, help="stop after this many; 0: no limit")
    add("--batch-size", type=positive_int, default=256, help="the GLOBAL batch, over all ranks")
    optimization.add_flags(training)
    add("--objective", choices=mlm.OBJECTIVES, default="masked",
        help="masked tokens, RDKit descriptors (a corpus prepared with --descriptors), or both")
    add("--mask-fraction", type=FlagParser.fraction, default=0.15, help="tokens to predict")
    add("--random-seed", "--seed", dest="seed", type=FlagParser.count, default=1729)
    add("--num-workers", type=FlagParser.count, default=0, help="DataLoader worker processes")
    add("--threads", type=positive_int, help="CPU threads (default: cores / local processes)")
    add("--dist-timeout", type=positive_int, default=300, help="peer wait, s")
    add = output.add_argument
    add("--output-dir", help=f"the run's folder (default: a new {DEFAULT_OUTPUT_DIR}/version_N)")
    add("--resume", **FlagParser.RESUME)
    add("--snapshot-every-steps", type=positive_int, default=500, help="and at the end")
    add("--eval-every-steps", type=positive_int, default=1000, help="and at the end")
    add("--log-every-steps", type=positive_int, default=50, help="loss and tokens/s")
    add("--quiet", action="store_true", help="warnings and the final line only")
    return parser


def main(args):
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=args.dist_timeout)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout,
                            **rendezvous(timeout))
    try:
        train(args, device)
    finally:
        dist.destroy_process_group()


def load_corpora(args, seed):
    """(the corpus, the molecules trained on, the held-out corpus, the molecules scored)."""
    path = Path(args.corpus)
    if not is_prepared(path):  # a CSV: prepared once into the cache, by one process per node
        path = ensure_prepared(path, PrepareOptions(smiles_column=args.smiles_column))
    corpus = PreparedCorpus(path)
    rng = np.random.default_rng(seed)
    if args.held_out:
        held_out = PreparedCorpus(args.held_out)
        if held_out.tokenizer.tokens != corpus.tokenizer.tokens:
            raise DataError(f"--held-out {args.held_out}: prepared in another vocabulary than "
                            f"{path}; prepare it with --vocabulary-from {path} --vocabulary fixed")
        if held_out.descriptor_columns != corpus.descriptor_columns:
            raise DataError(f"--held-out {args.held_out}: its descriptors differ from {path}'s")
        scored = np.sort(rng.permutation(len(held_out))[: args.eval_molecules])
        return corpus, np.arange(len(corpus)), held_out, scored
    if len(corpus) <= args.eval_molecules:
        raise DataError(f"{path}: {len(corpus)} molecules, too few to keep "
                        f"--eval-molecules {args.eval_molecules} out of training")
    order = rng.permutation(len(corpus))
    kept_out, trained = np.sort(order[: args.eval_molecules]), np.sort(order[args.eval_molecules :])
    return corpus, trained, corpus, kept_out


def train(args, device):
    started = time.perf_counter()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    master_process = rank == 0
    log = setup_logging(rank, args.quiet)
    set_cpu_threads(int(os.environ.get("LOCAL_WORLD_SIZE", 1)), args.threads)
    torch.manual_seed(args.seed)
    corpus, train_ids, held_out, scored = load_corpora(args, args.seed)
    assert_same_on_all_ranks({"corpus": corpus.digest, "held out": held_out.digest})
    tokenizer = mlm.pretraining_tokenizer(corpus.tokenizer)
    masked, descriptors = mlm.objective_parts(args.objective)
    mask_id = tokenizer.token_to_id[mlm.MASK] if masked else None
    train_set = PreparedDataset(corpus, train_ids, descriptors)
    held_out_set = PreparedDataset(held_out, scored, descriptors, scale_from=corpus)
    train_loader = get_ddp_dataloader(
        train_set, rank=rank, world_size=world_size, shuffle=True,
        batch_size=args.batch_size, seed=args.seed, num_workers=args.num_workers)
    eval_loader = get_ddp_dataloader(held_out_set, rank=0, world_size=1,
                                     batch_size=args.batch_size)
    output = prepare_run_dir(args.output_dir, DEFAULT_OUTPUT_DIR, args.resume, config=args)
    log.info("%s: %s molecules to train on, %s held out; rank %d of %d", corpus.folder,
             f"{len(train_ids):,}", f"{len(scored):,}", rank, world_size)
    hparams = dict(vocab_size=tokenizer.vocab_size, embedding_dim=args.embedding_dim,
                   d_model=args.d_model, num_layers=args.num_layers, dropout=args.dropout,
                   bidirectional=args.bidirectional, masked=masked,
                   descriptors=len(corpus.descriptor_columns) if descriptors else 0)
    model = mlm.PretrainingModel(**hparams).to(device)
    device_ids = [device] if device.type == "cuda" else None
    ddp_model = DistributedDataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = len(train_loader)
    total_steps = min(args.max_steps or np.inf, args.epochs * steps_per_epoch)
    scheduler = optimization.lr_schedule(optimizer, args, steps_per_epoch, total_steps)
    torch.manual_seed(args.seed * 100_003 + rank)  # dropout: (seed, rank), each rank its masks
    scaler = torch.amp.GradScaler(enabled=False)  # a part of save_snapshot's; no fp16 here
    writer = SummaryWriter(output) if master_process else None
    run_flags = {k: v for k, v in vars(args).items() if k not in RUN_ONLY}
    parts = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                 identity={"hparams": run_flags, "corpus": corpus.digest})
    snapshot = output / "checkpoints" / "last.pt"
    state = resume_or_start(snapshot, resume=args.resume, rank=rank, world_size=world_size,
                            fresh=mlm.PretrainingState(sample_digests=[""] * world_size), **parts)
    started -= state.seconds
    trained = state.sample_digests[rank] if len(state.sample_digests) == world_size else ""
    window, first_step = Window(device), state.global_step

    def take_snapshot():
        window.report(state, optimizer)  # the tokens since the last log line, into the state
        gathered = [None] * world_size
        dist.all_gather_object(gathered, (capture_rng(), trained))
        state.sample_digests = [digest for _, digest in gathered]
        state.seconds = time.perf_counter() - started
        if master_process:
            save_snapshot(snapshot, state=state, rng_states=[rng for rng, _ in gathered], **parts)
        dist.barrier()  # no rank runs ahead of a snapshot not yet on disk

    # From here SIGTERM asks the ranks to agree on a step to stop after; they check every few
    # steps, as a step here takes about a second on a CPU and a rank gets 15 s to stop
    preemption = Preemption(every=PREEMPTION_CHECK_EVERY_STEPS)
    while state.global_step < total_steps:
        # the shuffle comes from (seed, epoch); `start` skips the steps a snapshot already holds
        train_loader.sampler.set_epoch(state.epoch, start=state.step)
        model.train()
        for batch in preemption.watch(train_loader, start=state.step):
            # which tokens are masked: from (seed, epoch, step, rank), so a resumed run masks alike
            generator = mlm.batch_generator(args.seed, state.epoch, state.step + 1, rank)
            losses = train_step(ddp_model, optimizer, scheduler, scaler, batch, mask_id,
                                generator, args, device, world_size)
            if state.global_step == first_step:  # what benchmarks/speed.py --large reads
                log.info("start-up: first optimizer step taken; unique memory %.0f MB",
                         (unique_memory_bytes() or 0) / 2**20)
            trained = mlm.running_digest(trained, batch.inputs[0])
            state.step, state.global_step = state.step + 1, state.global_step + 1
            window.add(losses, batch.inputs[1].sum())
            if due(state.global_step, args.log_every_steps, total_steps):
                row = window.report(state, optimizer)  # all ranks: one all-reduce
                if master_process:
                    log.info("step %d  epoch %d  %s  %s tokens/s  lr %.2e", state.global_step,
                             state.epoch, losses_text(row),
                             f"{row['tokens_per_second']:,.0f}", row["lr"])
                    for name, value in row.items():
                        writer.add_scalar(f"Pretraining/{name}", value, state.global_step)
            if master_process and due(state.global_step, args.eval_every_steps, total_steps):
                evaluate(model, eval_loader, mask_id, args, device, state, writer, log)
            if due(state.global_step, args.snapshot_every_steps, total_steps):
                take_snapshot()
            if state.global_step >= total_steps:
                break
        else:
            if preemption.stopped_at:  # every rank stopped after this step: the snapshot here
                take_snapshot()
                raise preemption.stop(f"after {state.position()}")
            state.epoch, state.step = state.epoch + 1, 0

    if master_process:
        writer.close()  # its last events, on disk before run_main ends the process
        finish(output, model, tokenizer, hparams, state, args, world_size,
               time.perf_counter() - started)


def train_step(ddp_model, optimizer, scheduler, scaler, batch, mask_id, generator, args, device,
               world_size):
    """One optimizer step on this rank's slice of a global batch: its losses (see
    mlm.objective_losses), left on the device."""
    optimizer.zero_grad(set_to_none=True)
    losses = mlm.objective_losses(ddp_model, batch, mask_id, args.mask_fraction, generator,
                                  device)
    # sums over the masked tokens and the molecules, per molecule of the global batch (DDP
    # averages the ranks' gradients): every token and molecule weighs alike, on 1 process or N
    total = sum(values[0] for values in losses.values())
    (total / (args.batch_size // world_size)).backward()
    optimization.clip_gradients(ddp_model, optimizer, scaler, args.clip_grad_norm)
    optimizer.step()
    scheduler.step()
    return {name: [x.detach() for x in values[:2]] for name, values in losses.items()}


def losses_text(row):
    """The losses a row holds, for a log line."""
    names = dict(loss="loss", descriptor_mse="descriptor MSE", perplexity="perplexity",
                 accuracy="accuracy")
    return "  ".join(f"{text} {row[key]:.4f}" for key, text in names.items() if key in row)


def due(step, every, total_steps):
    return step % every == 0 or step == total_steps


class Window:
    """Training figures since the last log line, summed on the device (no sync a step)."""

    def __init__(self, device):
        self.device = device
        self.reset()

    def reset(self):
        # tokens; the masked loss and its count; the descriptors' loss and its count
        self.sums = torch.zeros(5, dtype=torch.float64, device=self.device)
        self.started = time.perf_counter()

    def add(self, losses, tokens):
        masked, descriptors = losses.get("masked", (0, 0)), losses.get("descriptors", (0, 0))
        values = [tokens, *masked, *descriptors]
        self.sums += torch.stack([torch.as_tensor(x, dtype=torch.float64).to(self.device)
                                  for x in values])

    def report(self, state, optimizer):
        dist.all_reduce(self.sums)  # every rank's tokens, masked places and molecules
        tokens, masked_loss, masked, descriptor_loss, described = self.sums.tolist()
        seconds = time.perf_counter() - self.started
        state.tokens += int(tokens)
        self.reset()
        row = dict(tokens_per_second=tokens / seconds, lr=optimizer.param_groups[0]["lr"])
        if masked:
            row["loss"] = masked_loss / masked
        if described:
            row["descriptor_mse"] = descriptor_loss / described
        return row


def evaluate(model, loader, mask_id, args, device, state, writer, log):
    """Rank 0 alone scores the bounded held-out sample (the others go on to their next
    all-reduce and wait there for it)."""
    row = dict(step=state.global_step, **mlm.evaluate(model, loader, mask_id, args.mask_fraction,
                                                      args.seed, device))
    state.history.append(row)
    log.info("step %d  held-out %s", row["step"], losses_text(row))
    for name, value in row.items():
        if name != "step":
            writer.add_scalar(f"HeldOut/{name}", value, row["step"])


def finish(output, model, tokenizer, hparams, state, args, world_size, seconds):
    """The run's folder as a model folder (what --init-from reads) and its metrics.json."""
    last = state.history[-1]
    save_model_dir(output, model.state_dict(), {
        "hparams": {"model": hparams, "objective": args.objective,
                    "mask_fraction": args.mask_fraction},
        "tokenizer": tokenizer.to_dict()})
    atomic_write_json(dict(
        **{f"held_out_{name}": value for name, value in last.items() if name != "step"},
        objective=args.objective, steps=state.global_step, epoch=state.epoch,
        tokens=state.tokens, tokens_per_second=state.tokens / seconds, wall_seconds=seconds,
        world_size=world_size, global_batch_size=args.batch_size, corpus=str(args.corpus),
        sample_digests=state.sample_digests, history=state.history), output / "metrics.json")
    if "perplexity" in last:
        print(f"Final held-out perplexity: {last['perplexity']:.4f}", flush=True)
    if "descriptor_mse" in last:
        print(f"Final held-out descriptor MSE: {last['descriptor_mse']:.4f}", flush=True)


if __name__ == "__main__":
    run_main(main, build_parser())
