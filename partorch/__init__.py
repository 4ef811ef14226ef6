"""partorch: parts for data-parallel (DDP) training of molecule models.

The training loop lives in the scripts (scripts/basic_neural_network.py and
its DDP twin); the package holds the parts they use, one concern a module:

    molecule_csv  reading and validating a CSV of SMILES and labels
    splits        train / dev / test indices (stratified, random, scaffold)
    tokenizer     SMILES and byte tokenizers
    datasets      the typed Batch, SMILES and feature datasets
    sampler       batch samplers that shard every global batch across ranks
    loaders       get_dataloader / get_ddp_dataloader
    rnn           the recurrent model (no loss, no optimiser, no DDP)
    tasks         loss and metrics: classification, multi-task, regression
    evaluation    model outputs over a loader; outputs for new SMILES
    distributed   rendezvous, threads, digests, object collectives
    checkpoint    atomic writes, snapshots, the saved model folder
    report        metrics.json, figures, TensorBoard at the end of a run
    plots         the figures (matplotlib, imported when drawing)
    chem          what needs RDKit
    flags, logs, errors   the scripts' flags, logging and exit policy
"""
from .checkpoint import load_model_dir, save_model_dir
from .datasets import Batch, FeatureDataset, SmilesDataset, TrainingData
from .errors import PartorchError, run_main
from .evaluation import predict, predict_smiles
from .loaders import get_dataloader, get_ddp_dataloader
from .molecule_csv import read_molecule_csv
from .rnn import RNNPredictor
from .sampler import LengthBucketBatchSampler
from .splits import split_indices
from .tasks import BinaryClassification, Regression
from .tokenizer import BytesTokenizer, SmilesTokenizer

__all__ = [
    "Batch", "BinaryClassification", "BytesTokenizer", "FeatureDataset", "LengthBucketBatchSampler",
    "PartorchError", "RNNPredictor", "Regression", "SmilesDataset", "SmilesTokenizer", "TrainingData",
    "get_dataloader", "get_ddp_dataloader", "load_model_dir", "predict", "predict_smiles", "read_molecule_csv",
    "run_main", "save_model_dir", "split_indices",
]
