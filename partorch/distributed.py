"""Process-group set-up from torchrun's environment, rank helpers, reductions.

Started by torchrun, RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT
are set and we join that group. Started by plain `python`, we make a group of
one in memory, so the same DDP code path runs unchanged.
"""
from dataclasses import dataclass
from datetime import timedelta
import logging
import os

import torch
import torch.distributed as dist

from .errors import PartorchError


class DistributedError(PartorchError):
    pass


@dataclass
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def master_process(self):
        return self.rank == 0


def _env_int(name, default):
    return int(os.environ.get(name, default))


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def set_cpu_threads(local_world_size, threads=None):
    """Split the cores between the processes of this host (oversubscribed
    threads spin against each other and run slower than fewer threads)."""
    torch.set_num_threads(threads or max(1, available_cores() // local_world_size))


def setup_distributed(timeout_seconds=300):
    local_rank = _env_int("LOCAL_RANK", 0)
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = timedelta(seconds=timeout_seconds)
    device_id = device if backend == "nccl" else None
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
        dist.init_process_group(backend, store=_fresh_store_after_restart(timeout), rank=_env_int("RANK", 0),
                                world_size=_env_int("WORLD_SIZE", 1), timeout=timeout, device_id=device_id)
    elif "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, timeout=timeout, device_id=device_id)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    # Every rank finishes joining before any may leave (a rank that failed
    # later and exited at once would break a peer still connecting).
    dist.barrier()
    ctx = DistContext(rank=dist.get_rank(), local_rank=local_rank, world_size=dist.get_world_size(),
                      local_world_size=_env_int("LOCAL_WORLD_SIZE", 1), device=device, backend=backend)
    logging.getLogger("partorch").info("process group: rank %d of %d (local rank %d), backend %s, device %s",
                                       ctx.rank, ctx.world_size, ctx.local_rank, backend, device)
    return ctx


def _fresh_store_after_restart(timeout):
    """torchrun's store outlives a restart, and with it the dead workers'
    addresses: the new gloo group would dial them and fail ("Connection
    refused"). A key prefix per restart keeps each attempt's keys apart."""
    use_agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], _env_int("MASTER_PORT", 29500),
                          is_master=not use_agent_store and _env_int("RANK", 0) == 0, timeout=timeout)
    return dist.PrefixStore(f"partorch/restart{os.environ['TORCHELASTIC_RESTART_COUNT']}", store)


def teardown_distributed():
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def get_rank():
    return dist.get_rank() if dist.is_initialized() else 0


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def is_master_process():
    return get_rank() == 0


def all_reduce_sum(tensor):
    """Sum over ranks, in place; a no-op in a single process."""
    if get_world_size() > 1:
        dist.all_reduce(tensor)
    return tensor


def broadcast_object(obj, src=0):
    """Rank `src`'s object on every rank. Every rank must call this."""
    if get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj):
    """Every rank's object, in rank order, on every rank."""
    if get_world_size() == 1:
        return [obj]
    gathered = [None] * get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def check_on_all_ranks(work):
    """Run `work` here; if it raised a PartorchError on any rank, raise it on all.

    For work some ranks do and others wait for: a plain barrier would leave
    the waiting ranks hanging when the working rank fails.
    """
    try:
        work()
        error = None
    except PartorchError as exc:
        error = str(exc)
    errors = [e for e in all_gather_object(error) if e]
    if errors:
        raise PartorchError(errors[0])


def assert_same_on_all_ranks(digests):
    """Stop every rank if any rank computed a different digest.

    `digests` maps a name ("split", "vocabulary") to a hex digest. Ranks that
    disagree would train on different data or embed tokens differently
    without any error, so this runs once at start-up.
    """
    everyone = all_gather_object(digests)
    for name in digests:
        values = [d[name] for d in everyone]
        if len(set(values)) > 1:
            groups = {v: [r for r, x in enumerate(values) if x == v] for v in values}
            detail = "; ".join(f"ranks {ranks}: {v[:12]}" for v, ranks in groups.items())
            raise DistributedError(f"the {name} differs between ranks ({detail}); "
                                   "do all ranks read the same file with the same flags?")


def barrier():
    if get_world_size() > 1:
        dist.barrier()


def unwrap(model):
    """The plain module inside a DDP wrapper (or the model itself)."""
    return model.module if hasattr(model, "module") else model
