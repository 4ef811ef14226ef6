"""The run's output folder, agreed by every rank before any training: given,
or a new `BASE/version_N` that rank 0 picks for all. Rank 0 checks that it
holds no earlier run (unless asked to resume it, or this is torchrun's
restart of the job that started it) and locks it, the local rank 0 of each
node creates its `logs/`, and every rank learns whether that worked and
logs to its own file there."""

import fcntl
from functools import partial
import json
import os
from pathlib import Path
import socket

import torch.distributed as dist

from .checkpoint import (
    JOB_FILE,
    MODEL_FILE,
    SNAPSHOT,
    CheckpointError,
    ensure_writable_dir,
    new_version_dir,
)
from .config import write_config
from .distributed import check_on_all_ranks, is_restart_of, torchrun_job_key
from .errors import raise_if_failed, run_or_report
from .files import atomic_write_json
from .logs import add_log_file, log

LOCK_FILE = ".lock"
_held_locks = []  # open lock files: the kernel lets go of them when this process ends, however


def prepare_run_dir(output_dir, default_base, resume=None, config=None):
    """The folder as a Path, with this rank's log file in it. Without
    `output_dir`, rank 0 picks `default_base/version_N` and sends it to the
    others (each picking its own would give a job as many folders as ranks);
    the folder names torchrun's job (`distributed.torchrun_job_key`), so that
    a restarted job finds its unfinished folder again and resumes there.
    A given folder that holds an earlier run is refused before anything is
    written to it, unless `resume` ("yes" or "auto"); a folder another job is
    writing to, always. `resume="latest"`: the newest run with a snapshot
    under `default_base`. `config`: the run's flags, written to config.yaml."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    claim = partial(_claim, output_dir, default_base, resume, config)
    if dist.is_initialized():
        output = _agreed_folder(claim)
    else:  # one process: no one to agree with
        output = claim()
        ensure_writable_dir(output / "logs")
    add_log_file(output / "logs", rank)
    log.info("writing to %s", output)
    return output


def _agreed_folder(claim):
    pick = [None]
    if dist.get_rank() == 0:  # the others learn the folder, or why rank 0 refused it
        pick = [run_or_report(lambda: str(claim()))]
    dist.broadcast_object_list(pick, src=0)
    output = Path(raise_if_failed(pick[0]))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    check_on_all_ranks(lambda: ensure_writable_dir(output / "logs") if local_rank == 0 else None)
    return output


def _claim(output_dir, default_base, resume, config):
    """Rank 0: the run's folder, checked, created and locked for this job."""
    job = torchrun_job_key()
    if resume == "latest":
        output_dir = latest_run(default_base)
    if output_dir is None:  # new, or this job's own after a restart; it names the job
        output = new_version_dir(default_base, job)
        _lock(output)
    else:
        output = Path(output_dir)
        _refuse_earlier_run(output, resume, job)
        ensure_writable_dir(output)
        _lock(output)
        if job is not None:
            atomic_write_json(job, output / JOB_FILE)  # a restart of this job may go on in here
    if config is not None and not (output / SNAPSHOT).exists():
        # a new run's flags; a resumed run keeps those it started with (a resume that its
        # snapshot then refuses must not leave other flags in the folder)
        write_config(config, output)
    return output


def latest_run(base):
    """The highest-numbered unfinished `base/version_N` holding a snapshot: the run
    `--resume latest` continues (the numbers grow with each new run; times on a shared disk
    need not). A finished run (its metrics.json written) is extended by naming it."""
    runs = [p for p in Path(base).glob("version_*") if p.name[8:].isdigit()]
    unfinished = [p for p in runs if (p / SNAPSHOT).exists() and not (p / "metrics.json").exists()]
    runs = sorted(unfinished, key=lambda p: int(p.name[8:]))
    if not runs:
        raise CheckpointError(
            f"--resume latest: no unfinished run under {base} has a snapshot ({SNAPSHOT})"
        )
    log.info("--resume latest: %s", runs[-1])
    return runs[-1]


def _refuse_earlier_run(folder, resume, job):
    found = _earlier_run(folder)
    if not found or resume or _started_by_this_job(folder, job):
        return
    raise CheckpointError(
        f"{folder} holds an earlier run ({found}): continue it with --resume, or choose "
        "another --output-dir"
    )


def _earlier_run(folder):
    """What in `folder` shows that a run wrote there, if anything did."""
    if (folder / MODEL_FILE).exists() or (folder / "metrics.json").exists():
        return "a finished model"
    if (folder / SNAPSHOT).exists():
        return f"its snapshot {SNAPSHOT}"
    if (folder / "logs").is_dir() or any(folder.glob("events.out.tfevents.*")):
        return "its logs"
    return None


def _started_by_this_job(folder, job):
    """Whether torchrun restarted the job that started this folder (its
    snapshot, if any, is checked again by `resume_or_start`)."""
    try:
        marked = json.loads((folder / JOB_FILE).read_text())
    except (OSError, ValueError):
        return False
    return marked == job and is_restart_of(marked)


def _lock(folder):
    """Hold an exclusive lock on `folder/.lock` until this process ends.
    flock is tied to the open file: any exit, a SIGKILL included, releases
    it, so a lock file left behind by a dead job is no obstacle."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise CheckpointError(f"output folder {folder} is not writable ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "a process"
        os.close(fd)
        raise CheckpointError(
            f"{folder} is in use by another job ({holder}): wait for it to end, or choose "
            "another --output-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
    _held_locks.append(fd)
