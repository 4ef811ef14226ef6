"""Run under torchrun by the integration tests: drives the DDP script's own
functions and the package's parts in real processes, and writes what each
rank saw to OUT/rank{r}.json. Usage: ddp_worker.py MODE OUT [options]."""

import argparse
from datetime import timedelta
import json
from pathlib import Path
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1] / "scripts")]
import basic_neural_network_ddp as ddp_script  # noqa: E402
from helpers import synthetic_molecules  # noqa: E402

from partorch import get_ddp_dataloader, optimization, run_main  # noqa: E402
from partorch.ddp.distributed import assert_same_on_all_ranks, rendezvous  # noqa: E402
from partorch.ddp.errors import exit_without_teardown  # noqa: E402
from partorch.molecules import BinaryClassification, RNNPredictor, SmilesTokenizer, smiles_dataset  # noqa: E402


def loader_for(opts):
    smiles, labels = synthetic_molecules(opts.n)
    tokenizer = SmilesTokenizer.build(smiles)
    loader = get_ddp_dataloader(
        smiles_dataset(smiles, labels, tokenizer),
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        batch_size=opts.batch_size,
        shuffle=True,
    )
    return loader, tokenizer


def sampler_orders(opts):
    loader, _ = loader_for(opts)
    orders = {}
    for epoch in (1, 2):
        loader.batch_sampler.set_epoch(epoch)
        orders[epoch] = [list(map(int, b)) for b in loader.batch_sampler]
    return {"orders": orders}


def uneven_training(opts):
    """The DDP script's train_one_epoch on shards that do not divide evenly."""
    loader, tokenizer = loader_for(opts)
    torch.manual_seed(0)
    model = RNNPredictor(
        tokenizer.vocab_size, embedding_dim=8, d_model=8, num_layers=2, dropout=0.0
    )
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    flags = argparse.Namespace(
        amp="off", batch_size=opts.batch_size, accumulate=1, quiet=True, clip_grad_norm=None
    )
    schedule = argparse.Namespace(lr_schedule="constant", warmup_epochs=0.0, epochs=2)
    constant = optimization.lr_schedule(optimizer, schedule, steps_per_epoch=1)
    steps = []
    for epoch in (1, 2):
        loader.batch_sampler.set_epoch(epoch)
        steps.append(len(loader))
        row, step_losses = ddp_script.train_one_epoch(
            ddp_model,
            optimizer,
            constant,
            torch.amp.GradScaler(enabled=False),
            loader,
            BinaryClassification(["y"]),
            flags,
            torch.device("cpu"),
            False,
        )
    return {
        "steps": steps,
        "samples": row["molecules"],
        "loss": row["train_loss"],
        "step_losses": step_losses,
    }


def start_up_digest(opts):
    # Each rank reads its own copy of the data: the copies differ, as they
    # would if one node had a stale file.
    flags = opts.rank1_flags if dist.get_rank() == 1 else opts.flags
    args = ddp_script.build_parser().parse_args(
        [opts.csv.replace("RANK", str(dist.get_rank())), *flags.split()]
    )
    assert_same_on_all_ranks(ddp_script.build_data(args).digests)
    return {"passed": True}


def peer_hangs(opts):
    # Rank 1 stops answering; rank 0's next collective must give up after
    # the process group's timeout instead of waiting forever.
    if dist.get_rank() == 1:
        time.sleep(600)
    dist.all_reduce(torch.ones(1))
    return {"passed": True}


MODES = {f.__name__: f for f in (sampler_orders, uneven_training, start_up_digest, peer_hangs)}


def main(opts):
    timeout = timedelta(seconds=opts.timeout)
    dist.init_process_group("gloo", timeout=timeout, **rendezvous(timeout))
    try:
        torch.set_num_threads(1)
        result = MODES[opts.mode](opts)
        result["world_size"] = dist.get_world_size()
        (Path(opts.out) / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
    exit_without_teardown()  # this worker exits right after training


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("out")
    parser.add_argument("--count", dest="n", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--csv", default="")
    parser.add_argument("--flags", default="", help="the DDP script's flags (start_up_digest)")
    parser.add_argument(
        "--rank1-flags", default="", help="rank 1's flags instead (start_up_digest)"
    )
    parser.add_argument("--timeout", type=int, default=60)
    run_main(main, parser)
