"""The pretraining parts: masking, the descriptors' head reading what a classifier's head
reads, the encoder's weights carried into a classifier (and a vocabulary that does not fit
them refused), and the pretrained weights held still for the first epochs of fine-tuning."""

from argparse import Namespace
import math

import pytest
import torch

from partorch import optimization
from partorch.ddp.checkpoint import CheckpointError
from partorch.molecules import pretraining as mlm
from partorch.molecules.rnn import RNNPredictor
from partorch.molecules.tokenizer import SmilesTokenizer

SIZES = dict(embedding_dim=8, d_model=8, num_layers=2, bidirectional=True)


def test_masking_chooses_real_tokens_only_and_the_same_ones_for_the_same_step():
    tokens = torch.randint(2, 20, (64, 30))
    lengths = torch.randint(5, 31, (64,))
    inputs, targets = mlm.mask_tokens(tokens, lengths, 20, 0.15, mlm.batch_generator(1, 2, 3, 0))
    chosen = targets != mlm.IGNORED
    padding = torch.arange(30).unsqueeze(0) >= lengths.unsqueeze(1)
    assert not chosen[padding].any()
    assert 0.10 < chosen.sum() / lengths.sum() < 0.20
    assert torch.equal(targets[chosen], tokens[chosen])
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # what is not chosen stays
    assert 0.7 < (inputs[chosen] == 20).float().mean() < 0.9  # mostly <mask>
    again = mlm.mask_tokens(tokens, lengths, 20, 0.15, mlm.batch_generator(1, 2, 3, 0))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)
    other = mlm.mask_tokens(tokens, lengths, 20, 0.15, mlm.batch_generator(1, 2, 4, 0))
    assert not torch.equal(other[1], targets)  # the next step masks other places


@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_descriptor_head_reads_the_encoding_a_classifier_s_head_reads(bidirectional):
    model = mlm.PretrainingModel(
        12, masked=False, descriptors=3, **{**SIZES, "bidirectional": bidirectional}
    ).eval()
    lengths = torch.tensor([7, 3, 5, 1])
    tokens = torch.randint(2, 12, (4, 7)) * (torch.arange(7) < lengths.unsqueeze(1))
    outputs = model.sequence_outputs(tokens, lengths)
    pooled = mlm.pooled_encoding(outputs, lengths, bidirectional)
    torch.testing.assert_close(pooled, model.encode(tokens, lengths))
    logits, predicted = model(tokens, lengths)
    assert logits is None and predicted.shape == (4, 3)


def test_the_descriptor_loss_leaves_out_what_rdkit_could_not_compute():
    predicted = torch.tensor([[1.0, 2.0], [0.0, 0.0], [5.0, 5.0]])
    targets = torch.tensor([[0.0, float("nan")], [2.0, 2.0], [float("nan")] * 2])
    loss, count = mlm.descriptor_loss(predicted, targets)
    assert loss.item() == pytest.approx(1.0 + 4.0)  # (1-0)^2 alone; (4 + 4) / 2
    assert count.item() == 2  # the last molecule has no descriptor to learn


def test_the_classifier_starts_from_the_encoder_and_its_new_tokens_from_fresh_rows():
    pretrained = ("<pad>", "<unk>", "C", "O", "<mask>")
    encoder = mlm.PretrainingModel(len(pretrained), **SIZES)
    tokens = [*pretrained, "N"]  # the fine-tuning data adds one token
    model = RNNPredictor(len(tokens), **SIZES)
    fresh_row = model.embedding.weight[5].clone()
    mlm.load_encoder(model, tokens, encoder.state_dict(), pretrained, "enc")
    assert torch.equal(model.embedding.weight[:5], encoder.embedding.weight)
    assert torch.equal(model.embedding.weight[5], fresh_row)
    for name, weight in encoder.lstm.named_parameters():
        assert torch.equal(getattr(model.lstm, name), weight)


def test_a_vocabulary_that_does_not_start_with_the_encoder_s_is_refused():
    pretrained = ("<pad>", "<unk>", "C", "O", "<mask>")
    encoder = mlm.PretrainingModel(len(pretrained), **SIZES)
    tokens = ["<pad>", "<unk>", "O", "C", "<mask>"]
    model = RNNPredictor(len(tokens), **SIZES)
    with pytest.raises(CheckpointError, match="token 2: this run has 'O', the encoder 'C'"):
        mlm.load_encoder(model, tokens, encoder.state_dict(), pretrained, "enc")
    wider = RNNPredictor(len(pretrained), **{**SIZES, "d_model": 16})
    with pytest.raises(CheckpointError, match="does not fit this model"):
        mlm.load_encoder(wider, pretrained, encoder.state_dict(), pretrained, "enc")


def test_the_pretrained_weights_stay_put_for_the_frozen_epochs_then_train():
    model = RNNPredictor(6, **SIZES)
    optimization.mark_pretrained(model.lstm.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    args = Namespace(lr_schedule="constant", warmup_epochs=0, epochs=3, freeze_pretrained_epochs=1)
    scheduler = optimization.lr_schedule(optimizer, args, steps_per_epoch=2)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    tokens, lengths = torch.randint(1, 6, (4, 7)), torch.full((4,), 7)

    def step():
        model(tokens, lengths).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

    step(), step()  # the frozen epoch: 2 steps
    state = model.state_dict()
    assert all(torch.equal(state[k], start[k]) for k in start if k.startswith("lstm."))
    assert not torch.equal(state["head.0.weight"], start["head.0.weight"])
    step()
    assert not torch.equal(model.state_dict()["lstm.weight_ih_l0"], start["lstm.weight_ih_l0"])


def _scaled_run(schedule, warmup_epochs):
    """A model whose LSTM is marked pretrained, its optimizer and schedule at a tenth of the
    rate for the LSTM."""
    model = RNNPredictor(6, **SIZES)
    optimization.mark_pretrained(model.lstm.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.0)
    args = Namespace(
        lr_schedule=schedule, warmup_epochs=warmup_epochs, epochs=3, pretrained_lr_scale=0.1
    )
    return model, optimizer, optimization.lr_schedule(optimizer, args, steps_per_epoch=2)


def test_the_pretrained_layers_take_steps_a_tenth_the_size_of_the_new_layers():
    model, optimizer, _ = _scaled_run("constant", 0)
    new, pretrained = optimizer.param_groups
    assert {id(p) for p in pretrained["params"]} == {id(p) for p in model.lstm.parameters()}
    assert len(new["params"]) + len(pretrained["params"]) == len(list(model.parameters()))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    model(torch.randint(1, 6, (4, 7)), torch.full((4,), 7)).sum().backward()
    optimizer.step()  # Adam's first step moves each weight with a gradient by about its rate
    moved = {k: (v - start[k]).abs().max().item() for k, v in model.state_dict().items()}
    assert 0.009 < moved["head.0.weight"] <= 0.0101
    assert 0.0009 < moved["lstm.weight_ih_l0"] <= 0.00101


def test_the_two_rates_keep_their_ratio_through_the_schedule_and_a_resume():
    model, optimizer, scheduler = _scaled_run("cosine", 1)
    tokens, lengths = torch.randint(1, 6, (4, 7)), torch.full((4,), 7)
    rates = []
    for _ in range(4):  # 2 steps of warmup, then the cosine over the other 4 of 6
        rates.append([group["lr"] for group in optimizer.param_groups])
        model(tokens, lengths).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    cosine = 0.005 * (1 + math.cos(math.pi / 4))
    assert [new for new, _ in rates] == pytest.approx([0.005, 0.01, 0.01, cosine])
    assert [pretrained for _, pretrained in rates] == pytest.approx([0.1 * n for n, _ in rates])
    _, resumed, resumed_schedule = _scaled_run("cosine", 1)  # built as a resumed run builds it
    resumed.load_state_dict(optimizer.state_dict())
    resumed_schedule.load_state_dict(scheduler.state_dict())
    assert [g["lr"] for g in resumed.param_groups] == [g["lr"] for g in optimizer.param_groups]


def test_the_pretraining_vocabulary_ends_with_mask_and_no_smiles_holds_it():
    corpus = SmilesTokenizer.build(["CCO", "c1ccccc1"])
    tokenizer = mlm.pretraining_tokenizer(corpus)
    assert tokenizer.tokens[: corpus.vocab_size] == corpus.tokens
    assert tokenizer.tokens[-1] == mlm.MASK
    assert tokenizer.token_to_id[mlm.MASK] not in tokenizer.encode("C<mask>O")
