"""Train a SMILES LSTM classifier on BBBP in one process.

    python scripts/basic_neural_network.py dataset/BBBP.csv

Its twin, basic_neural_network_ddp.py, runs the same job under torchrun;
`diff scripts/basic_neural_network.py scripts/basic_neural_network_ddp.py`
shows exactly what data parallelism adds.
"""
import time

import torch
from torch.utils.tensorboard import SummaryWriter

from partorch import (RNNPredictor, build_parser, evaluate_split, finish_run, get_dataloader,
                      model_hparams, prepare_checkpointing, prepare_data, prepare_output_dir,
                      run_main, seed_everything, set_cpu_threads, setup_logging, train)


def main(args):
    started = time.perf_counter()
    setup_logging(args.quiet)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    set_cpu_threads(1, args.threads)
    seed_everything(args.seed)
    data = prepare_data(args)

    loader_args = dict(smiles_list=data.table.smiles, labels=data.table.labels, tokenizer=data.tokenizer,
                       batch_size=args.batch_size, num_workers=args.num_workers, sampler=args.sampler)
    train_loader = get_dataloader(**loader_args, indices=data.splits.train, shuffle=True, seed=args.seed,
                                  augment=args.augment)
    dev_loader = get_dataloader(**loader_args, indices=data.splits.dev, augment=args.tta > 0)
    test_loader = get_dataloader(**loader_args, indices=data.splits.test, augment=args.tta > 0)
    prepare_output_dir(args.output_dir)

    model = RNNPredictor(data.tokenizer.vocab_size, **model_hparams(args)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    writer = SummaryWriter(args.output_dir)

    checkpointing = prepare_checkpointing(args, data.tokenizer, device)
    result = train(model=model, optimizer=optimizer, train_loader=train_loader, dev_loader=dev_loader,
                   epochs=args.epochs, patience=args.patience, global_batch_size=args.batch_size,
                   accumulate=args.accumulate, amp=args.amp, device=device, writer=writer,
                   progress=not args.quiet, tta=args.tta, test_loader=test_loader, **checkpointing)
    model.load_state_dict(result.best_state)
    test = evaluate_split(model, test_loader, device, "test split", tta=args.tta)
    finish_run(args=args, result=result, test=test, tokenizer=data.tokenizer, writer=writer,
               world_size=1, started=started)


if __name__ == "__main__":
    run_main(main, build_parser(__doc__, default_output_dir="runs/basic"))
