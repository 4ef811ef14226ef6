"""partorch: a data-parallel (DDP) training template for SMILES classifiers."""
from .checkpoint import load_model_dir, save_model_dir
from .cli import (build_parser, finish_run, model_hparams, prepare_checkpointing, prepare_data, prepare_output_dir,
                  run_main, seed_everything, setup_logging, verify_same_data_on_all_ranks)
from .data import (LengthBucketBatchSampler, SmilesDataset, collate_batch, get_dataloader, get_ddp_dataloader,
                   read_smiles_csv, split_indices)
from .distributed import set_cpu_threads, setup_distributed, teardown_distributed, unwrap
from .errors import PartorchError
from .evaluation import evaluate, predict, predict_smiles, roc_auc
from .rnn import RNNPredictor
from .tokenizer import BytesTokenizer, SmilesTokenizer, build_tokenizer, load_tokenizer
from .training_loop import evaluate_split, train

__all__ = [
    "BytesTokenizer", "LengthBucketBatchSampler", "PartorchError", "RNNPredictor", "SmilesDataset",
    "SmilesTokenizer", "build_parser", "build_tokenizer", "collate_batch", "evaluate", "evaluate_split",
    "finish_run", "get_dataloader", "get_ddp_dataloader", "load_model_dir", "load_tokenizer", "model_hparams",
    "predict", "predict_smiles", "prepare_checkpointing", "prepare_data", "prepare_output_dir", "read_smiles_csv", "roc_auc",
    "run_main", "save_model_dir", "seed_everything", "set_cpu_threads", "setup_distributed", "setup_logging",
    "split_indices", "teardown_distributed", "train", "unwrap", "verify_same_data_on_all_ranks",
]
