"""Run under torchrun by tests/test_ddp_correctness.py: exercises the
package's DDP pieces in real processes and writes what each rank saw to
OUT/rank{r}.json. Usage: ddp_worker.py MODE OUT [options]."""
import argparse
import json
from pathlib import Path
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import synthetic_molecules  # noqa: E402
from partorch import (RNNPredictor, SmilesTokenizer, build_parser, evaluate_split, get_ddp_dataloader,  # noqa: E402
                      prepare_data, run_main, setup_distributed, teardown_distributed,
                      verify_same_data_on_all_ranks)
from partorch.distributed import all_reduce_sum  # noqa: E402
from partorch.training_loop import StepOptions, set_epoch, train_one_epoch  # noqa: E402


def tiny_model(vocab_size, seed=0):
    torch.manual_seed(seed)
    return RNNPredictor(vocab_size, embedding_dim=8, d_model=8, num_layers=2, dropout=0.0)


def loader_for(ctx, n, batch_size, seed=0):
    smiles, labels = synthetic_molecules(n, seed)
    tokenizer = SmilesTokenizer.build(smiles)
    loader = get_ddp_dataloader(rank=ctx.rank, world_size=ctx.world_size, smiles_list=smiles, labels=labels,
                                tokenizer=tokenizer, batch_size=batch_size, shuffle=True, seed=seed)
    return loader, tokenizer


def sampler_orders(ctx, opts):
    loader, _ = loader_for(ctx, opts.n, opts.batch_size)
    orders = {}
    for epoch in (1, 2):
        set_epoch(loader, epoch)
        orders[epoch] = [list(map(int, b)) for b in loader.batch_sampler]
    return {"orders": orders}


def uneven_training(ctx, opts):
    loader, tokenizer = loader_for(ctx, opts.n, opts.batch_size)
    model = DistributedDataParallel(tiny_model(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = []
    for epoch in (1, 2):
        set_epoch(loader, epoch)
        steps.append(len(loader))
        loss, samples = train_one_epoch(model, optimizer, loader, ctx.device,
                                        StepOptions(opts.batch_size // ctx.world_size))
    return {"steps": steps, "samples": samples, "loss": loss}


def parity(ctx, opts):
    loader, tokenizer = loader_for(ctx, opts.n, opts.batch_size)
    model = DistributedDataParallel(tiny_model(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for epoch in range(1, opts.epochs + 1):
        set_epoch(loader, epoch)
        train_one_epoch(model, optimizer, loader, ctx.device,
                        StepOptions(opts.batch_size // ctx.world_size, accumulate=opts.accumulate))
    if ctx.rank == 0:
        torch.save(model.module.state_dict(), Path(opts.out) / f"params_world{ctx.world_size}_acc{opts.accumulate}.pt")
    return {"steps": len(loader) * opts.epochs}


def evaluation(ctx, opts):
    args = build_parser("", "unused").parse_args([opts.csv])
    data = prepare_data(args)
    model = DistributedDataParallel(tiny_model(data.tokenizer.vocab_size, seed=3))
    result = {}
    for split in ("dev", "test"):
        indices = getattr(data.splits, split)
        common = dict(smiles_list=data.table.smiles, labels=data.table.labels, tokenizer=data.tokenizer,
                      batch_size=16, indices=indices)
        whole = get_ddp_dataloader(rank=0, world_size=1, **common)
        shard = get_ddp_dataloader(rank=ctx.rank, world_size=ctx.world_size, **common)
        result[split] = {"master": evaluate_split(model, whole, ctx.device, split).roc_auc,
                         "sharded": evaluate_split(model, shard, ctx.device, split, sharded=True).roc_auc,
                         "shard_size": sum(len(b) for b in shard.batch_sampler)}
    return result


def start_up_digest(ctx, opts):
    # Each rank reads its own copy of the data: the copies differ, as they
    # would if one node had a stale file.
    args = build_parser("", "unused").parse_args([opts.csv.replace("RANK", str(ctx.rank))])
    verify_same_data_on_all_ranks(prepare_data(args))
    return {"passed": True}


def peer_hangs(ctx, opts):
    # Rank 1 stops answering; rank 0's next collective must give up after
    # the process group's timeout instead of waiting forever.
    if ctx.rank == 1:
        time.sleep(600)
    all_reduce_sum(torch.ones(1))
    return {"passed": True}


MODES = {f.__name__: f for f in (sampler_orders, uneven_training, parity, evaluation, start_up_digest, peer_hangs)}


def main(opts):
    ctx = setup_distributed(timeout_seconds=opts.timeout)
    torch.set_num_threads(1)
    result = MODES[opts.mode](ctx, opts)
    result["world_size"] = ctx.world_size
    (Path(opts.out) / f"rank{ctx.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("out")
    parser.add_argument("--count", dest="n", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--csv", default="")
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--accumulate", type=int, default=1)
    run_main(main, parser, cleanup=teardown_distributed)
