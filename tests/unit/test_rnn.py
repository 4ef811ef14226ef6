import pytest
import torch

from partorch.molecules.datasets import collate_token_ids
from partorch.molecules.rnn import RNNPredictor, reverse_each


def _batch(lengths, vocab=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(1, vocab, (n,), generator=g) for n in lengths]
    batch = collate_token_ids([(t, torch.tensor([0.0])) for t in ids])
    return (*batch.inputs, batch.targets)


def test_shapes():
    tokens, lengths, _ = _batch([5, 9, 3])
    for bidirectional in (True, False):
        model = RNNPredictor(
            20, embedding_dim=8, d_model=6, num_layers=2, bidirectional=bidirectional
        )
        assert model(tokens, lengths).shape == (3, 1)
        assert model.encode(tokens, lengths).shape == (3, 12 if bidirectional else 6)
    assert RNNPredictor(20, d_model=6, num_outputs=27)(tokens, lengths).shape == (3, 27)


def test_reverse_each_reverses_only_the_real_tokens():
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]).unsqueeze(-1)
    assert reverse_each(x, torch.tensor([3, 2])).squeeze(-1).tolist() == [
        [3, 2, 1, 0],
        [5, 4, 0, 0],
    ]


def test_bidirectional_summary_uses_forward_and_backward_final_states():
    """The tutorial's model concatenated one direction's state twice; here the
    second half must be the backward LSTM after reading the molecule in reverse."""
    torch.manual_seed(0)
    model = RNNPredictor(20, embedding_dim=8, d_model=6, num_layers=1, dropout=0.0).eval()
    tokens, lengths, _ = _batch([7])
    summary = model.encode(tokens, lengths)
    embedded = model.embedding(tokens)
    one_way = torch.nn.LSTM(8, 6, batch_first=True)
    one_way.load_state_dict(
        {k: v for k, v in model.lstm.state_dict().items() if not k.endswith("_reverse")}
    )
    forward_final = one_way(embedded)[0][:, -1]
    one_way.load_state_dict(
        {
            k.removesuffix("_reverse"): v
            for k, v in model.lstm.state_dict().items()
            if k.endswith("_reverse")
        }
    )
    backward_final = one_way(embedded.flip(1))[0][:, -1]
    assert torch.allclose(summary[:, :6], forward_final, atol=1e-6)
    assert torch.allclose(summary[:, 6:], backward_final, atol=1e-6)
    assert not torch.allclose(summary[:, :6], summary[:, 6:], atol=1e-3)


def test_backward_direction_of_the_last_layer_reaches_the_logit():
    torch.manual_seed(0)
    model = RNNPredictor(20, embedding_dim=8, d_model=6, num_layers=3, dropout=0.0)
    for lengths in ([7, 4], [5, 5]):  # the layer-by-layer path and the fused call
        model.zero_grad()
        tokens, lengths, _ = _batch(lengths)
        model(tokens, lengths).sum().backward()
        for name in ("weight_hh_l2", "weight_hh_l2_reverse"):
            assert getattr(model.lstm, name).grad.abs().sum() > 0


def _exact_model(**kwargs):
    torch.manual_seed(0)
    return RNNPredictor(20, embedding_dim=16, d_model=16, num_layers=3, dropout=0.0, **kwargs)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_packed_path_for_gpus_equals_the_layer_by_layer_path(bidirectional):
    """On CUDA a batch of mixed lengths goes through pack_padded_sequence (cuDNN); checked here on
    CPU."""
    model = _exact_model(bidirectional=bidirectional).eval()
    tokens, lengths, _ = _batch([5, 13, 2, 13, 8], seed=4)
    x = model.embedding(tokens)
    assert torch.allclose(
        model._encode_packed(x, lengths), model._encode_mixed_lengths(x, lengths), atol=1e-5
    )


@pytest.mark.parametrize("bidirectional", [True, False])
def test_fused_call_equals_the_layer_by_layer_path(bidirectional):
    """A batch of one length runs as one nn.LSTM call; it must compute what the
    exact padded path computes, outputs and gradients alike."""
    model = _exact_model(bidirectional=bidirectional)
    tokens, lengths, _ = _batch([11] * 6, seed=2)
    fused = model(tokens, lengths)
    fused.sum().backward()
    fused_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    layered = model.head(model._encode_mixed_lengths(model.embedding(tokens), lengths))
    layered.sum().backward()
    assert torch.allclose(fused, layered, atol=1e-5)
    for fused_grad, p in zip(fused_grads, model.parameters()):
        assert torch.allclose(fused_grad, p.grad, atol=1e-5)


def test_padding_never_changes_a_prediction():
    """Odd lengths among equal ones: each molecule's logit equals the model's on it alone
    (where every molecule is a batch of one length: the fused call)."""
    model = _exact_model().eval()
    tokens, lengths, _ = _batch([3, 17, 12, 9, 1, 12, 30, 12], seed=1)
    with torch.no_grad():
        together = model(tokens, lengths)
        alone = torch.cat(
            [
                model(tokens[i : i + 1, :n], lengths[i : i + 1])
                for i, n in enumerate(lengths.tolist())
            ]
        )
    assert torch.allclose(together, alone, atol=1e-5)


def test_model_holds_no_optimizer_or_loss():
    model = RNNPredictor(20)
    assert not any(isinstance(m, torch.nn.modules.loss._Loss) for m in model.modules())
    assert not any(isinstance(v, torch.optim.Optimizer) for v in vars(model).values())


def test_a_model_saved_with_one_lstm_per_layer_and_direction_still_loads():
    """Before the fused call the weights were forward_layers.<i>.* and backward_layers.<i>.*."""
    model = _exact_model().eval()
    old = {}
    for key, value in model.state_dict().items():
        if key.startswith("lstm."):
            name, layer = key[len("lstm.") :].split("_l")
            group = "backward_layers" if layer.endswith("_reverse") else "forward_layers"
            key = f"{group}.{layer.removesuffix('_reverse')}.{name}_l0"
        old[key] = value.clone()
    assert "backward_layers.2.weight_hh_l0" in old
    reloaded = _exact_model()
    torch.nn.init.zeros_(reloaded.lstm.weight_hh_l2_reverse)
    reloaded.load_state_dict(old)
    reloaded.eval()
    tokens, lengths, _ = _batch([4, 9])
    with torch.no_grad():
        assert torch.equal(reloaded(tokens, lengths), model(tokens, lengths))


def test_the_bf16_probe_leaves_the_seeded_stream_alone():
    """It runs inside build_model, after the seed and before the model's initial weights."""
    from partorch.molecules.rnn import lstm_runs_in_bfloat16

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    lstm_runs_in_bfloat16(torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)
