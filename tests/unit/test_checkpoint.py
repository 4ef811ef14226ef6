"""Atomic writes, the model folder through a factory, snapshots of one run only."""

import os
import stat
import subprocess
import sys

import pytest
import torch

from partorch.ddp.checkpoint import (
    CheckpointError,
    TrainingState,
    capture_rng,
    load_model_dir,
    load_state,
    new_version_dir,
    restore_snapshot,
    save_model_dir,
    save_snapshot,
)
from partorch.ddp.files import atomic_torch_save


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "last.pt"
    atomic_torch_save({"epoch": 1}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_torch_save({"epoch": 2, "bad": Unpicklable()}, path)
    assert load_state(path) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "last.pt"
    atomic_torch_save({"w": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CheckpointError, match=f"{path}: corrupt"):
        load_state(path)


def test_a_model_folder_is_rebuilt_through_the_factory_it_is_given(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_model_dir(
        tmp_path,
        model.state_dict(),
        {
            "hparams": {"model": {"in_features": 3, "out_features": 2}},
            "task": {"kind": "regression"},
        },
    )
    loaded, descriptions = load_model_dir(
        tmp_path, lambda d: torch.nn.Linear(**d["hparams"]["model"])
    )
    assert descriptions["task"] == {"kind": "regression"} and not loaded.training
    assert torch.equal(loaded.weight, model.weight)
    with pytest.raises(CheckpointError, match="does not fit the model"):
        load_model_dir(tmp_path, lambda d: torch.nn.Linear(4, 2))


def _parts():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    return model, torch.optim.AdamW(model.parameters()), torch.amp.GradScaler(enabled=False)


def test_a_snapshot_resumes_only_the_run_that_wrote_it(tmp_path):
    model, optimizer, scaler = _parts()
    identity = {"hparams": {"seed": 1, "lr": 0.001}, "split": "abc"}
    state = TrainingState(
        epoch=2, best_epoch=1, best_score=0.8, history=[{"epoch": 1}, {"epoch": 2}]
    )
    save_snapshot(
        tmp_path / "last.pt",
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        state=state,
        rng_states=[capture_rng()],
        identity=identity,
    )
    snapshot = load_state(tmp_path / "last.pt")
    fresh, fresh_optimizer, fresh_scaler = _parts()
    with torch.no_grad():
        fresh.weight.add_(1.0)
    restored = restore_snapshot(
        snapshot,
        model=fresh,
        optimizer=fresh_optimizer,
        scaler=fresh_scaler,
        identity=identity,
        rank=0,
        world_size=1,
    )
    assert restored == state and torch.equal(fresh.weight, model.weight)
    other = {"hparams": {"seed": 2, "lr": 0.01}, "split": "abc"}
    with pytest.raises(
        CheckpointError,
        match=r"another run \(hparams.lr: snapshot 0.001, this run 0.01; "
        r"hparams.seed: snapshot 1, this run 2\)",
    ):
        restore_snapshot(
            snapshot,
            model=fresh,
            optimizer=fresh_optimizer,
            scaler=fresh_scaler,
            identity=other,
            rank=0,
            world_size=1,
        )


def test_a_snapshot_whose_weights_are_named_otherwise_is_refused(tmp_path):
    """The optimiser's state follows parameters by position: renamed weights would swap layers'
    moments."""
    model, optimizer, scaler = _parts()
    save_snapshot(
        tmp_path / "last.pt",
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        state=TrainingState(),
        rng_states=[capture_rng()],
        identity={},
    )
    snapshot = load_state(tmp_path / "last.pt")
    snapshot["model"] = {f"old_{k}": v for k, v in snapshot["model"].items()}
    with pytest.raises(CheckpointError, match="weights are named differently"):
        restore_snapshot(
            snapshot,
            model=model,
            optimizer=optimizer,
            scaler=scaler,
            identity={},
            rank=0,
            world_size=1,
        )


def test_each_run_gets_a_new_version_folder_and_a_restarted_job_its_own(tmp_path, monkeypatch):
    base = tmp_path / "runs" / "ddp"
    assert new_version_dir(base) == base / "version_0"
    assert (
        new_version_dir(base) == base / "version_1"
    )  # no job key (plain python): always a new folder
    (base / "version_7").mkdir()
    (base / "version_x").mkdir()  # not ours: ignored
    job = new_version_dir(base, "rdzv:abc")
    assert job == base / "version_8"
    assert new_version_dir(base, "rdzv:abc") == job  # torchrun restarted the job: the same folder
    assert new_version_dir(base, "rdzv:other") == base / "version_9"
    (job / "metrics.json").write_text(
        "{}"
    )  # that run finished: the same --rdzv-id again is a new job
    assert new_version_dir(base, "rdzv:abc") == base / "version_10"


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


@pytest.mark.filterwarnings(
    "ignore:.*to a meta parameter"
)  # meta weights cannot hold the values; that is fine
def test_a_snapshot_loads_to_the_cpu_and_resumes_a_model_on_another_device(tmp_path):
    """'meta' stands in for a GPU: the snapshot's random states stay on the CPU
    (torch and numpy need them there), the model and optimiser take their device's."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scaler = torch.amp.GradScaler(enabled=False)
    path = tmp_path / "last.pt"
    save_snapshot(
        path,
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        state=TrainingState(epoch=4),
        rng_states=[capture_rng()],
        identity={"seed": 1},
    )
    snapshot = load_state(path)
    assert {t.device.type for t in _tensors(snapshot)} == {"cpu"}
    on_device = torch.nn.Linear(3, 2).to("meta")
    device_optimizer = torch.optim.AdamW(on_device.parameters())
    torch.manual_seed(12345)
    state = restore_snapshot(
        snapshot,
        model=on_device,
        optimizer=device_optimizer,
        scaler=scaler,
        identity={"seed": 1},
        rank=0,
        world_size=1,
    )
    assert state.epoch == 4
    assert torch.equal(
        torch.get_rng_state(), snapshot["rng"][0]["torch"]
    )  # restored, not the 12345 stream
    moments = device_optimizer.state[on_device.weight]["exp_avg"]
    assert moments.device.type == "meta" and moments.shape == (2, 3)


def test_the_fp16_loss_scale_survives_a_snapshot(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    scaler.step(optimizer)
    scaler.update(new_scale=512.0)  # as if overflowing steps had halved it seven times
    save_snapshot(
        tmp_path / "last.pt",
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        state=TrainingState(epoch=1),
        rng_states=[capture_rng()],
        identity={},
    )
    fresh = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    restore_snapshot(
        load_state(tmp_path / "last.pt"),
        model=torch.nn.Linear(2, 1),
        optimizer=torch.optim.AdamW(model.parameters()),
        scaler=fresh,
        identity={},
        rank=0,
        world_size=1,
    )
    assert fresh.get_scale() == 512.0


def test_each_rank_resumes_its_own_random_state_and_a_new_world_size_is_said(tmp_path, caplog):
    model, optimizer, scaler = _parts()
    streams = []
    for rank in (0, 1):
        torch.manual_seed(100 + rank)
        streams.append(capture_rng())
    save_snapshot(
        tmp_path / "last.pt",
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        state=TrainingState(epoch=3),
        rng_states=streams,
        identity={},
    )
    snapshot = load_state(tmp_path / "last.pt")
    for rank in (0, 1):
        restore_snapshot(
            snapshot,
            model=model,
            optimizer=optimizer,
            scaler=scaler,
            identity={},
            rank=rank,
            world_size=2,
        )
        assert torch.equal(torch.get_rng_state(), streams[rank]["torch"])
    torch.manual_seed(7)
    own = torch.get_rng_state()
    with caplog.at_level("WARNING", logger="partorch"):
        state = restore_snapshot(
            snapshot,
            model=model,
            optimizer=optimizer,
            scaler=scaler,
            identity={},
            rank=0,
            world_size=3,
        )
    assert state.epoch == 3
    assert torch.equal(torch.get_rng_state(), own)  # not rank 0's stream reused by every rank
    assert "written by 2 ranks and this job has 3" in caplog.text


def test_snapshots_keep_the_umask_s_mode_fsync_their_folder_and_clear_stale_temporaries(
    tmp_path, monkeypatch
):
    path = tmp_path / "last.pt"
    stale = tmp_path / ".last.pt.k3j2_x9a.tmp"  # what a writer killed mid-write leaves
    stale.write_bytes(b"half a snapshot")
    other = tmp_path / ".last.pt.bak.abcdefgh.tmp"  # another file's: not ours to remove
    other.write_bytes(b"")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)), real_fsync(fd))
    )
    atomic_torch_save({"epoch": 1}, path)
    assert synced == [False, True]  # the file's bytes, then the folder holding the rename
    assert not stale.exists() and other.exists()
    # the mode: the umask the process started with (read once, at import), not mkstemp's 0600
    written = tmp_path / "umask027.pt"
    code = (
        "import os; os.umask(0o027); from partorch.ddp.files import atomic_torch_save; "
        f"atomic_torch_save({{}}, {str(written)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert stat.S_IMODE(written.stat().st_mode) == 0o640


def test_training_curves_draw_a_history_whose_test_figures_stop_partway():
    """A run resumed without --test-every-epoch: test figures for its first epochs only."""
    from partorch.ddp.plots import training_curves_figure

    history = [
        {"epoch": e, "train_loss": 1.0 / e, "dev_loss": 0.9, "dev_roc_auc": 0.7}
        | ({"test_loss": 0.8, "test_roc_auc": 0.75} if e <= 2 else {})
        for e in range(1, 5)
    ]
    figure = training_curves_figure(history, best_epoch=3)
    loss_ax = figure.axes[0]
    drawn = {line.get_label(): list(line.get_xdata()) for line in loss_ax.get_lines()}
    assert drawn["train"] == [1, 2, 3, 4] and drawn["dev"] == [1, 2, 3, 4]
    assert drawn["test"] == [1, 2]
