"""Train a SMILES LSTM classifier on BBBP with DistributedDataParallel.

    torchrun --standalone --nproc-per-node 2 scripts/basic_neural_network_ddp.py dataset/BBBP.csv
    torchrun --master_port 31133 scripts/basic_neural_network_ddp.py dataset/BBBP.csv
    python scripts/basic_neural_network_ddp.py dataset/BBBP.csv     # a group of one

torchrun starts one process per CPU share or GPU and tells each its RANK and
WORLD_SIZE. `--batch-size` is the global batch, split evenly between ranks, so
the optimisation matches the single-process script step for step.
"""
import time

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

from partorch import (RNNPredictor, build_parser, evaluate_split, finish_run, get_ddp_dataloader,
                      model_hparams, prepare_checkpointing, prepare_data, prepare_output_dir,
                      run_main, seed_everything, set_cpu_threads, setup_distributed, setup_logging,
                      teardown_distributed, train, verify_same_data_on_all_ranks)


def main(args):
    started = time.perf_counter()
    setup_logging(args.quiet)
    ctx = setup_distributed(args.dist_timeout)
    device, master_process = ctx.device, ctx.master_process
    set_cpu_threads(ctx.local_world_size, args.threads)
    seed_everything(args.seed)  # the same seed everywhere: same split, vocabulary and initial weights
    data = prepare_data(args)  # no collective inside: bad input stops every rank alike
    verify_same_data_on_all_ranks(data)

    loader_args = dict(smiles_list=data.table.smiles, labels=data.table.labels, tokenizer=data.tokenizer,
                       batch_size=args.batch_size, num_workers=args.num_workers, sampler=args.sampler)
    train_loader = get_ddp_dataloader(rank=ctx.rank, world_size=ctx.world_size, **loader_args,
                                      indices=data.splits.train, shuffle=True, seed=args.seed, augment=args.augment)
    # Rank 0 scores dev and test alone, unless --distributed-eval shares them out.
    eval_shard = dict(rank=ctx.rank, world_size=ctx.world_size) if args.distributed_eval else dict(rank=0, world_size=1)
    dev_loader = get_ddp_dataloader(**eval_shard, **loader_args, indices=data.splits.dev, augment=args.tta > 0)
    test_loader = get_ddp_dataloader(**eval_shard, **loader_args, indices=data.splits.test, augment=args.tta > 0)
    prepare_output_dir(args.output_dir, ctx.rank, ctx.local_rank)

    model = RNNPredictor(data.tokenizer.vocab_size, **model_hparams(args)).to(device)
    # DDP copies rank 0's weights to every rank and all-reduces gradients in backward().
    model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                    gradient_as_bucket_view=True, bucket_cap_mb=args.bucket_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    writer = SummaryWriter(args.output_dir) if master_process else None  # one writer for the whole job

    checkpointing = prepare_checkpointing(args, data.tokenizer, device)
    result = train(model=model, optimizer=optimizer, train_loader=train_loader, dev_loader=dev_loader,
                   epochs=args.epochs, patience=args.patience, global_batch_size=args.batch_size,
                   accumulate=args.accumulate, amp=args.amp, device=device, writer=writer,
                   progress=master_process and not args.quiet, sharded_eval=args.distributed_eval,
                   tta=args.tta, test_loader=test_loader, **checkpointing)
    model.module.load_state_dict(result.best_state)
    test = evaluate_split(model, test_loader, device, "test split", sharded=args.distributed_eval, tta=args.tta)
    if master_process:
        finish_run(args=args, result=result, test=test, tokenizer=data.tokenizer, writer=writer,
                   world_size=ctx.world_size, started=started)


if __name__ == "__main__":
    run_main(main, build_parser(__doc__, default_output_dir="runs/ddp"), cleanup=teardown_distributed)
