"""The run's output folder, agreed by every rank before any training: given,
or a new `BASE/version_N` that rank 0 picks for all. Rank 0 creates it, the
local rank 0 of each node its `logs/`, and every rank learns whether that
worked and logs to its own file there."""

import os
from pathlib import Path

import torch.distributed as dist

from .checkpoint import ensure_writable_dir, new_version_dir
from .distributed import check_on_all_ranks, torchrun_job_key
from .errors import raise_if_failed, run_or_report
from .logs import add_log_file, log


def prepare_run_dir(output_dir, default_base):
    """The folder as a Path, with this rank's log file in it. Without
    `output_dir`, rank 0 picks `default_base/version_N` and sends it to the
    others (each picking its own would give a job as many folders as ranks);
    the folder names torchrun's job (`distributed.torchrun_job_key`), so that
    a restarted job finds its unfinished folder again and resumes there."""
    if dist.is_initialized():
        output = _agreed_folder(output_dir, default_base, torchrun_job_key())
    else:  # one process: no one to agree with
        output = Path(output_dir or new_version_dir(default_base))
        ensure_writable_dir(output / "logs")
    add_log_file(output / "logs", dist.get_rank() if dist.is_initialized() else 0)
    log.info("writing to %s", output)
    return output


def _agreed_folder(output_dir, default_base, job_key):
    rank = dist.get_rank()
    if output_dir is None:
        pick = [
            run_or_report(lambda: new_version_dir(default_base, job_key)) if rank == 0 else None
        ]
        dist.broadcast_object_list(pick, src=0)
        output_dir = raise_if_failed(pick[0])
    output = Path(output_dir)
    check_on_all_ranks(lambda: ensure_writable_dir(output) if rank == 0 else None)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    check_on_all_ranks(lambda: ensure_writable_dir(output / "logs") if local_rank == 0 else None)
    return output
