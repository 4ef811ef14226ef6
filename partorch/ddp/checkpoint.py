"""Atomic writes, training snapshots, and a saved model folder.

A model folder holds `best_model.pt` (a state dict: tensors only, loadable
with `weights_only=True`) and JSON files that describe it (`hparams.json`
with the model's constructor arguments, `task.json`, `tokenizer.json`...).
`load_model_dir` rebuilds the model through a factory you pass, so this
module knows no model class. A training snapshot (`checkpoints/last.pt`)
holds everything needed to continue a run after a crash or a torchrun
restart, again as tensors and plain types only.
"""

from dataclasses import asdict, dataclass, field
import json
import math
from pathlib import Path
import random
import tempfile

import numpy as np
import torch

from .distributed import is_restart_of, torchrun_job_key
from .errors import PartorchError, UnexpectedError
from .files import atomic_torch_save, atomic_write_json
from .logs import log

MODEL_FILE = "best_model.pt"
SNAPSHOT = "checkpoints/last.pt"  # in a run's folder


class CheckpointError(PartorchError):
    pass


class DivergedError(PartorchError):
    pass


JOB_FILE = ".job"


def new_version_dir(base, job_key=None):
    """`base/version_N` for a new run, N one above the highest there (as
    Lightning's loggers do), so runs never stack their events in one folder.
    The folder notes `job_key` (see `distributed.torchrun_job_key`), so a
    torchrun restart of the same job finds its own folder again and resumes
    (an unfinished one: a new job that reuses an --rdzv-id starts anew)."""
    base = Path(base)
    try:
        base.mkdir(parents=True, exist_ok=True)
        versions = {int(p.name[8:]): p for p in base.glob("version_*") if p.name[8:].isdigit()}
        for number in sorted(versions) if job_key else []:
            marker, finished = versions[number] / JOB_FILE, versions[number] / "metrics.json"
            if (
                marker.exists()
                and json.loads(marker.read_text()) == job_key
                and not finished.exists()
            ):
                return versions[number]
        number = max(versions, default=-1)
        while True:
            number += 1
            try:
                (
                    base / f"version_{number}"
                ).mkdir()  # atomic: two runs starting at once get two folders
                break
            except FileExistsError:
                continue
        if job_key:
            atomic_write_json(job_key, base / f"version_{number}" / JOB_FILE)
    except OSError as exc:
        raise CheckpointError(f"output folder {base} is not writable ({exc.strerror})") from None
    return base / f"version_{number}"


def ensure_writable_dir(path):
    """Create `path` and prove we can write there, before any training."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise CheckpointError(f"output folder {path} is not writable ({exc.strerror})") from None


def load_state(path):
    """A torch file, tensors and plain types only, on the CPU (the caller moves what
    belongs on a device)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except (OSError, MemoryError) as exc:  # the disk or the node, not the file: a retry may pass
        raise UnexpectedError(f"{path}: cannot read now ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # torch raises many kinds for a damaged file
        raise CheckpointError(
            f"{path}: corrupt or not a partorch checkpoint ({type(exc).__name__})"
        ) from None


# ------------------------------------------------------------ model folder
def save_model_dir(directory, state_dict, descriptions):
    """best_model.pt, and `name.json` for each entry of `descriptions`."""
    directory = Path(directory)
    atomic_torch_save(state_dict, directory / MODEL_FILE)
    for name, content in descriptions.items():
        atomic_write_json(content, directory / f"{name}.json")


def load_model_dir(directory, build_model, device="cpu"):
    """(model in eval mode, descriptions) from a saved model folder.

    `build_model(descriptions)` returns an untrained model, where
    `descriptions` maps each JSON file's stem ("hparams", "task", ...) to
    its content."""
    directory = Path(directory)
    if not (directory / MODEL_FILE).is_file():
        raise CheckpointError(f"{directory}: not a saved model folder (it has no {MODEL_FILE})")
    descriptions = {}
    for path in sorted(directory.glob("*.json")):
        try:
            descriptions[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path}: cannot read ({exc})") from None
    try:
        model = build_model(descriptions)
    except PartorchError as exc:
        raise CheckpointError(f"{directory}: {exc}") from None
    try:
        model.load_state_dict(load_state(directory / MODEL_FILE))
    except (RuntimeError, KeyError) as exc:
        raise CheckpointError(
            f"{directory / MODEL_FILE} does not fit the model its JSON files describe "
            f"({str(exc).splitlines()[0][:200]})"
        ) from None
    return model.to(device).eval(), descriptions


# ------------------------------------------------------------ training snapshots
@dataclass
class TrainingState:
    """Where a run stands after an epoch: what keep-best and early stopping need."""

    epoch: int = 0  # epochs completed
    best_epoch: int = 0
    best_score: float = -math.inf
    best_state: dict = field(default_factory=dict)  # copies of the best epoch's weights
    history: list = field(default_factory=list)  # one dict of figures per epoch
    # the torchrun job training it now (distributed.torchrun_job_key): its restarts resume
    job: str = None
    # wall clock of every attempt up to this snapshot: a resumed run's time is all of it
    seconds: float = 0.0
    # a run stopped inside an epoch (see `pause`): that epoch, its steps trained and their figures
    paused: dict = None

    def end_epoch(self, row, model, task, seconds):
        """Count the epoch whose figures are `row`; keep the weights when its dev score is
        the best; `seconds`: the run's wall clock so far, earlier attempts included. An
        epoch whose figures are not finite stops the run (see `_stop_if_diverged`)."""
        self._stop_if_diverged(row)
        self.history.append(row)
        self.seconds = seconds
        self.epoch = row["epoch"]
        score = row[f"dev_{task.score_name}"]
        if task.is_better(score, self.best_score):
            self.best_score, self.best_epoch = score, self.epoch
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def _stop_if_diverged(self, row):
        """A NaN or infinite figure (the training loss first: the cause) means the weights
        diverged, and every later epoch would be as bad; it must never become the best
        epoch either. Every rank holds the same row (the loss summed over ranks, the dev
        figures sent by rank 0), so all stop here together, at the end of the epoch; it is
        bad set-up, not a fault, so a torchrun restart will not train it again."""
        bad = [(k, v) for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            name, value = bad[0]
            raise DivergedError(
                f"epoch {row['epoch']}: {name} {value}: training diverged (too high a --lr, now "
                f"{row.get('lr', '?')}, or labels on a huge scale?); the last snapshot holds "
                f"epoch {self.epoch}"
            )

    def pause(self, epoch, step, row, step_losses, seconds):
        """The run stops after `step` batches of `epoch` (told to end: see ddp.preemption);
        `row` and `step_losses` are the figures of those steps, which `merge_paused` adds to
        the rest of the epoch's once the run continues."""
        self.paused = dict(epoch=epoch, step=step, row=row, step_losses=step_losses)
        self.seconds = seconds

    def paused_step(self, epoch):
        """The batches of `epoch` trained before a pause, which the sampler skips."""
        return self.paused["step"] if self.paused and self.paused["epoch"] == epoch else 0

    def merge_paused(self, row, step_losses):
        """The whole epoch's figures: those before the pause, if any, and `row`'s."""
        if not self.paused:
            return row, step_losses
        paused, self.paused = self.paused, None
        before = paused["row"]
        molecules = before["molecules"] + row["molecules"]
        seconds = before["seconds"] + row["seconds"]
        loss = before["train_loss"] * before["molecules"] + row["train_loss"] * row["molecules"]
        merged = {
            **row,
            "train_loss": loss / molecules,
            "molecules": molecules,
            "seconds": seconds,
            "samples_per_second": molecules / seconds,
        }
        return merged, paused["step_losses"] + step_losses

    def position(self):
        """Where the run stands, for the log: the epoch, or the step of the epoch it paused in."""
        where = f"epoch {self.epoch}"
        if self.paused:
            where = f"step {self.paused['step']} of epoch {self.paused['epoch']}"
        best = f"best dev score {self.best_score:.4f} at epoch {self.best_epoch}"
        return f"{where} ({best})"

    def patience_ran_out(self, patience):
        """Whether `patience` epochs (0: never) passed without a better dev score."""
        if patience and self.epoch - self.best_epoch >= patience:
            log.info(
                "no better dev score for %d epochs: stopped after epoch %d", patience, self.epoch
            )
            return True
        return False

    def best_weights(self):
        """The best epoch's weights; an error when no epoch gave a finite dev score."""
        if not self.best_state:
            raise CheckpointError("no epoch gave a finite dev score: nothing to keep (see logs/)")
        return self.best_state


def save_snapshot(path, *, model, optimizer, scaler, state, rng_states, identity, scheduler=None):
    """Written by rank 0 only: the plain module's weights, the optimiser, its
    learning-rate schedule (if any) and loss scaler, the training state, every
    rank's random states, and what identifies the run (compared on resume)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(
        dict(
            model=model.state_dict(),
            optimizer=optimizer.state_dict(),
            scheduler=scheduler.state_dict() if scheduler else {},
            scaler=scaler.state_dict(),
            state=asdict(state),
            rng=rng_states,
            identity=identity,
        ),
        path,
    )


def resume_or_start(path, *, resume, rank, world_size, worst_score=None, fresh=None, **parts):
    """The TrainingState to train from: the snapshot at `path` loaded into
    `parts` (model, optimizer, scheduler, scaler, identity: see
    `restore_snapshot`) and this rank's random state, or a fresh state.

    A snapshot is continued when `resume` asks for it or when this process
    is torchrun's restart of the job that wrote it (`is_restart_of`); any
    other run finding one stops, so two runs never mix in one folder.
    `resume`: None, or "yes" (True) and "latest" (a missing snapshot is an
    error), or "auto" (a missing one starts the run).
    `identity` must match the snapshot's (flags that define the result,
    digests of the data): another run's snapshot is refused.
    A fresh run starts from `fresh`, by default TrainingState(best_score=worst_score); a
    snapshot's state is restored as the same type."""
    path = Path(path)
    fresh = fresh or TrainingState(best_score=worst_score)
    if path.exists():
        state = _continue(path, resume, rank, world_size, parts, type(fresh))
    elif resume and resume != "auto":  # auto: a requeued job that may not have got so far
        raise CheckpointError(f"--resume: there is no snapshot at {path}")
    else:
        state = fresh
    state.job = torchrun_job_key()  # the job writing the snapshots from now on: its restarts resume
    return state


def _continue(path, resume, rank, world_size, parts, state_type):
    snapshot = load_state(path)
    if not (resume or is_restart_of(snapshot.get("state", {}).get("job"))):
        raise CheckpointError(
            f"{path.parent.parent} holds an earlier run (its snapshot {path}): continue it with "
            "--resume, or choose another --output-dir"
        )
    state = restore_snapshot(
        snapshot, rank=rank, world_size=world_size, state_type=state_type, **parts
    )
    log.info("resumed from the snapshot after %s", state.position())
    return state


def restore_snapshot(
    snapshot,
    *,
    model,
    optimizer,
    scaler,
    identity,
    rank,
    world_size,
    scheduler=None,
    state_type=None,
):
    """Load a snapshot of *this* run into model, optimiser, schedule and
    scaler, and this rank's random state; return its TrainingState."""
    differences = _differences(snapshot.get("identity", {}), identity)
    if differences:
        raise CheckpointError(
            "the snapshot belongs to another run ("
            + "; ".join(differences[:8])
            + "); use another --output-dir, or remove its checkpoints/"
        )
    if set(snapshot["model"]) != set(model.state_dict()):
        # the optimiser's state follows the parameters by position, so renamed weights (a model
        # saved by an older partorch) would hand one layer's moments to another
        raise CheckpointError(
            "the snapshot's weights are named differently from this model's (written by an "
            "older partorch?); start afresh in another --output-dir"
        )
    try:
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(snapshot["scheduler"])
        scaler.load_state_dict(snapshot["scaler"])
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(
            f"the snapshot does not fit this model and these flags ({str(exc)[:200]})"
        ) from None
    state = (state_type or TrainingState)(**snapshot["state"])
    if len(snapshot["rng"]) == world_size:
        restore_rng(snapshot["rng"][rank])
    # an elastic job that came back with more or fewer ranks: one rank's state cannot serve all
    elif rank == 0:
        log.warning(
            "warning: the snapshot was written by %d ranks and this job has %d: weights, "
            "optimiser, epoch and batches continue exactly, but each rank's dropout masks come "
            "from (seed, rank) afresh, so the run will not match an uninterrupted one",
            len(snapshot["rng"]),
            world_size,
        )
    return state


def _differences(saved, current, prefix=""):
    """'name: snapshot X, this run Y' for every value that differs, nested dicts flattened."""
    found = []
    for key in sorted(set(saved) | set(current), key=str):
        old, new = saved.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            found += _differences(old, new, f"{prefix}{key}.")
        elif old != new:
            found.append(f"{prefix}{key}: snapshot {old!r}, this run {new!r}")
    return found


def capture_rng():
    """This process's random states as tensors and plain types (weights_only-safe)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state):
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(_tuples(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].cpu())


def _tuples(obj):
    # torch.load gives back lists where random.setstate wants tuples
    return tuple(_tuples(x) for x in obj) if isinstance(obj, (list, tuple)) else obj
