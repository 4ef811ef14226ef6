import torch

from partorch.datasets import collate_token_ids
from partorch.rnn import RNNPredictor, reverse_each


def _batch(lengths, vocab=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(1, vocab, (n,), generator=g) for n in lengths]
    batch = collate_token_ids([(t, torch.tensor([0.0])) for t in ids])
    return (*batch.inputs, batch.targets)


def test_shapes():
    tokens, lengths, _ = _batch([5, 9, 3])
    for bidirectional in (True, False):
        model = RNNPredictor(20, embedding_dim=8, d_model=6, num_layers=2, bidirectional=bidirectional)
        assert model(tokens, lengths).shape == (3, 1)
        assert model.encode(tokens, lengths).shape == (3, 12 if bidirectional else 6)
    assert RNNPredictor(20, d_model=6, num_outputs=27)(tokens, lengths).shape == (3, 27)


def test_reverse_each_reverses_only_the_real_tokens():
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]).unsqueeze(-1)
    assert reverse_each(x, torch.tensor([3, 2])).squeeze(-1).tolist() == [[3, 2, 1, 0], [5, 4, 0, 0]]


def test_bidirectional_summary_uses_forward_and_backward_final_states():
    """The tutorial's model concatenated one direction's state twice; here the
    second half must be the backward LSTM after reading the molecule in reverse."""
    torch.manual_seed(0)
    model = RNNPredictor(20, embedding_dim=8, d_model=6, num_layers=1, dropout=0.0).eval()
    tokens, lengths, _ = _batch([7])
    summary = model.encode(tokens, lengths)
    embedded = model.embedding(tokens)
    forward_final = model.forward_layers[0](embedded)[0][:, -1]
    backward_final = model.backward_layers[0](embedded.flip(1))[0][:, -1]
    assert torch.allclose(summary[:, :6], forward_final, atol=1e-6)
    assert torch.allclose(summary[:, 6:], backward_final, atol=1e-6)
    assert not torch.allclose(summary[:, :6], summary[:, 6:], atol=1e-3)


def test_backward_direction_of_the_last_layer_reaches_the_logit():
    torch.manual_seed(0)
    model = RNNPredictor(20, embedding_dim=8, d_model=6, num_layers=3, dropout=0.0)
    tokens, lengths, _ = _batch([7, 4])
    model(tokens, lengths).sum().backward()
    for layer in (model.forward_layers[-1], model.backward_layers[-1]):
        assert layer.weight_hh_l0.grad.abs().sum() > 0


def test_padding_never_changes_a_prediction():
    torch.manual_seed(0)
    model = RNNPredictor(20, embedding_dim=16, d_model=16, num_layers=3, dropout=0.0).eval()
    tokens, lengths, _ = _batch([3, 17, 9, 1, 30, 12], seed=1)
    with torch.no_grad():
        together = model(tokens, lengths)
        alone = torch.cat([model(tokens[i:i + 1, :n], lengths[i:i + 1]) for i, n in enumerate(lengths.tolist())])
    assert torch.allclose(together, alone, atol=1e-5)


def test_model_holds_no_optimizer_or_loss():
    model = RNNPredictor(20)
    assert not any(isinstance(m, torch.nn.modules.loss._Loss) for m in model.modules())
    assert not any(isinstance(v, torch.optim.Optimizer) for v in vars(model).values())
