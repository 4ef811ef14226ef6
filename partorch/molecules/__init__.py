"""The molecule parts: what a user with other data, another model or another
task replaces (the scripts' ADAPT block calls them).

    table      reading and validating a CSV of SMILES and labels
    chem       what needs RDKit: canonical and random SMILES, scaffolds, fingerprints
    cached     canonical SMILES and scaffolds kept for later runs (once per node)
    splits     train / dev / test indices (stratified, random, scaffold)
    tokenizer  SMILES and byte tokenizers
    datasets   SMILES datasets (tokenized once; random SMILES per epoch)
    tasks      loss and metrics: classification, multi-task, regression
    data       CSV to TrainingData in one call (what the scripts use)
    rnn        the recurrent model (no loss, no optimiser, no DDP)
    prepared   a CSV prepared once into memory-mapped arrays (large corpora)
    pretraining  the masked-token objective, and --init-from's fine-tuning start
    inference  model outputs for new SMILES
    features   computed features beside the encoding (--extra-features)
    flags      the flags of the parts above, and --preset's recipes
"""

from .data import molecule_data
from .datasets import SmilesDataset, smiles_dataset
from .flags import PRESETS, add_molecule_flags, molecule_data_options
from .inference import predict_smiles
from .pretraining import rnn_predictor
from .rnn import RNNPredictor
from .splits import split_indices
from .table import read_molecule_csv
from .tasks import BinaryClassification, Regression, task_from_dict
from .tokenizer import BytesTokenizer, SmilesTokenizer, tokenizer_from_dict

__all__ = [
    "PRESETS",
    "BinaryClassification",
    "BytesTokenizer",
    "RNNPredictor",
    "Regression",
    "SmilesDataset",
    "SmilesTokenizer",
    "add_molecule_flags",
    "molecule_data",
    "molecule_data_options",
    "predict_smiles",
    "read_molecule_csv",
    "rnn_predictor",
    "smiles_dataset",
    "split_indices",
    "task_from_dict",
    "tokenizer_from_dict",
]
