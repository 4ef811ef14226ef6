import numpy as np
import torch

from partorch.data import get_dataloader
from partorch.evaluation import evaluate
from partorch.rnn import RNNPredictor
from partorch.tokenizer import SmilesTokenizer
from partorch.training_loop import train

from conftest import synthetic_molecules


def test_tiny_model_overfits_a_few_dozen_molecules():
    torch.manual_seed(0)
    smiles, labels = synthetic_molecules(48)
    tokenizer = SmilesTokenizer.build(smiles)
    loader = get_dataloader(smiles_list=smiles, labels=labels, tokenizer=tokenizer, batch_size=16, shuffle=True)
    model = RNNPredictor(tokenizer.vocab_size, embedding_dim=16, d_model=32, num_layers=1, dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    result = train(model=model, optimizer=optimizer, train_loader=loader, dev_loader=loader, epochs=40,
                   device=torch.device("cpu"), global_batch_size=16, patience=0)
    model.load_state_dict(result.best_state)
    assert evaluate(model, loader, torch.device("cpu")).roc_auc >= 0.95
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_best_state_is_a_copy_not_a_reference():
    smiles, labels = synthetic_molecules(32)
    tokenizer = SmilesTokenizer.build(smiles)
    loader = get_dataloader(smiles_list=smiles, labels=labels, tokenizer=tokenizer, batch_size=8, shuffle=True)
    model = RNNPredictor(tokenizer.vocab_size, embedding_dim=8, d_model=8, num_layers=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    result = train(model=model, optimizer=optimizer, train_loader=loader, dev_loader=loader, epochs=3,
                   device=torch.device("cpu"), global_batch_size=8)
    assert 1 <= result.best_epoch <= 3 and result.epochs_completed == 3
    saved = result.best_state["head.3.weight"]
    if result.best_epoch < 3:
        assert not torch.equal(saved, model.head[3].weight)
    assert saved.data_ptr() != model.head[3].weight.data_ptr()
    assert np.isfinite(result.train_samples_per_second)
