"""partorch: parts for data-parallel (DDP) training, and the molecule parts
of its SMILES template.

The training loop lives in the scripts (scripts/basic_neural_network.py and
the rungs above it); the package holds the parts they use, one concern a
module, in two folders: `partorch.ddp` (generic: any data, model and task)
and `partorch.molecules` (what a user with other data replaces). The
generic parts the scripts call are importable from `partorch` itself, and
so, for convenience, are the molecule parts' main names.
"""

from .ddp import optimization
from .ddp.checkpoint import (
    TrainingState,
    capture_rng,
    load_model_dir,
    resume_or_start,
    save_model_dir,
    save_snapshot,
)
from .ddp.data import Batch, FeatureDataset, TrainingData
from .ddp.distributed import rendezvous, set_cpu_threads
from .ddp.errors import DataError, PartorchError, run_main
from .ddp.evaluation import predict, score
from .ddp.flags import FlagParser
from .ddp.loaders import get_dataloader, get_ddp_dataloader
from .ddp.logs import setup_logging
from .ddp.report import write_report
from .ddp.run_dir import prepare_run_dir
from .ddp.sampler import LengthBucketBatchSampler
from .molecules import (
    BinaryClassification,
    BytesTokenizer,
    Regression,
    RNNPredictor,
    SmilesDataset,
    SmilesTokenizer,
    predict_smiles,
    read_molecule_csv,
    smiles_dataset,
    split_indices,
)

__all__ = [
    "BinaryClassification",
    "BytesTokenizer",
    "RNNPredictor",
    "Regression",
    "SmilesDataset",
    "SmilesTokenizer",
    "predict_smiles",
    "read_molecule_csv",
    "smiles_dataset",
    "split_indices",
    "Batch",
    "DataError",
    "FeatureDataset",
    "FlagParser",
    "LengthBucketBatchSampler",
    "PartorchError",
    "TrainingData",
    "TrainingState",
    "capture_rng",
    "get_dataloader",
    "get_ddp_dataloader",
    "load_model_dir",
    "optimization",
    "predict",
    "prepare_run_dir",
    "rendezvous",
    "resume_or_start",
    "run_main",
    "score",
    "save_model_dir",
    "save_snapshot",
    "set_cpu_threads",
    "setup_logging",
    "write_report",
]
