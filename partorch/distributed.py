"""Helpers for the DDP script: where the process group meets, threads per
process, digests, and collectives that carry Python objects or errors.

The script itself calls `init_process_group`, `all_reduce`, `broadcast`,
`barrier` and `destroy_process_group`; what is here is small enough to
read at once and hides none of those steps.
"""
import hashlib
import json
import os
import socket

import numpy as np
import torch
import torch.distributed as dist

from .errors import PartorchError
from .logs import log


class DistributedError(PartorchError):
    pass


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def set_cpu_threads(processes_on_this_host, threads=None):
    """Split the cores between the processes of this host (oversubscribed
    threads spin against each other and run slower than fewer threads)."""
    torch.set_num_threads(threads or max(1, available_cores() // processes_on_this_host))


def rank_seed(seed, rank):
    """A seed for the random streams that must differ between ranks
    (dropout), drawn from (seed, rank): reproducible, and not seed + rank,
    which would give run (seed 1, rank 1) the stream of (seed 2, rank 0)."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def rendezvous(timeout):
    """Extra `init_process_group` arguments for how this process was started.

    torchrun's first attempt: none (the env:// defaults read RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Plain `python`: a group of one in
    memory. After a torchrun restart: torchrun's store outlives the restart,
    and with it the dead workers' addresses, so a new gloo group would dial
    them ("Connection refused"); a key prefix per restart keeps each
    attempt's keys apart.
    """
    if "WORLD_SIZE" not in os.environ:
        return dict(store=dist.HashStore(), rank=0, world_size=1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restart == 0:
        return {}
    rank = int(os.environ["RANK"])
    use_agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ.get("MASTER_PORT", 29500)),
                          is_master=not use_agent_store and rank == 0, timeout=timeout)
    return dict(store=dist.PrefixStore(f"partorch/restart{restart}", store), rank=rank,
                world_size=int(os.environ["WORLD_SIZE"]))


def restarted_by_torchrun():
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0


def torchrun_job_key():
    """What stays the same for one torchrun job across its restarts, or None
    outside torchrun: the rendezvous id every node shares (`--rdzv-id`, or
    the one `--standalone` draws), else this host's agent and its port.
    Read on rank 0, which names the job's output folder."""
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ:
        return None
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    if run_id != "none":
        return f"rdzv:{run_id}"
    return f"agent:{socket.gethostname()}:{os.getppid()}:{os.environ.get('MASTER_PORT')}"


def digest(obj):
    """A short, stable fingerprint of JSON-able data."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def all_gather_object(obj):
    """Every rank's object, in rank order, on every rank."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def check_on_all_ranks(work):
    """Run `work` here; if it failed on any rank, fail on all with its message.

    For work some ranks do and others wait for (a barrier that also says
    whether the work succeeded): a plain barrier would leave the waiting
    ranks hanging when the working rank fails.
    """
    try:
        work()
        error = None
    except PartorchError as exc:
        error = str(exc)
    except Exception as exc:  # a full disk, a bug: still one line on every rank, the details in the log
        log.exception("rank %d failed", dist.get_rank())
        error = f"rank {dist.get_rank()} failed: {type(exc).__name__}: {exc}"
    errors = [e for e in all_gather_object(error) if e]
    if errors:
        raise PartorchError(errors[0])


def assert_same_on_all_ranks(named_digests):
    """Stop every rank if any rank computed a different digest.

    `named_digests` maps a name ("split", "vocabulary") to a digest. Ranks
    that disagree would train on different data or embed tokens differently
    without any error, so this runs once at start-up.
    """
    everyone = all_gather_object(named_digests)
    for name in named_digests:
        values = [d[name] for d in everyone]
        if len(set(values)) > 1:
            groups = {v: [r for r, x in enumerate(values) if x == v] for v in values}
            detail = "; ".join(f"ranks {ranks}: {v[:12]}" for v, ranks in groups.items())
            raise DistributedError(f"the {name} differs between ranks ({detail}); "
                                   "do all ranks read the same file with the same flags?")
