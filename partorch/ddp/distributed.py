"""Helpers for the DDP script: where the process group meets, threads per
process, digests, and collectives that carry Python objects or errors.

The script itself calls `init_process_group`, `all_reduce`, `broadcast`,
`barrier` and `destroy_process_group`; what is here is small enough to
read at once and hides none of those steps.
"""

from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
import hashlib
import json
import multiprocessing
import os
import sys
import threading
import time
import types
import uuid

import torch
import torch.distributed as dist

from .errors import PartorchError, UnexpectedError, describe
from .logs import log


class DistributedError(PartorchError):
    pass


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# True while every process of the node does the same work at once (the cache's lock could not be
# taken): a pool of pool_cores() then takes this process's share of the cores, not all of them.
_every_local_process_computes = False


def pool_cores():
    """Cores a pool of this process may take: all the node's for the one process the cache's
    lock lets compute while the others wait; its share where every process of the node
    computes at once (LOCAL_WORLD_SIZE, set by torchrun, processes)."""
    if not _every_local_process_computes:
        return available_cores()
    return share_of_cores(int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def share_of_cores(processes):
    """One process's share of the node's cores when `processes` split them: at least one."""
    return max(1, available_cores() // processes)


@contextmanager
def every_local_process_computes():
    """Marks work that every process of the node does at once: see pool_cores."""
    global _every_local_process_computes
    before, _every_local_process_computes = _every_local_process_computes, True
    try:
        yield
    finally:
        _every_local_process_computes = before


def map_in_processes(function, *iterables, workers):
    """function(*items) over the iterables zipped, in order, in a pool of `workers` processes,
    yielded as they come; `function` must live in a module, not in the script. Spawned, not
    forked: the caller may hold threads (torch's, a process group's), which a fork would copy
    mid-lock."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        with _main_module_hidden():  # map() starts the processes
            results = pool.map(function, *iterables)
        yield from results


@contextmanager
def _main_module_hidden():
    """A spawned process first imports the script that started its parent (for functions
    defined there): a script that does its work outside `if __name__ == "__main__"` would run
    it again in every process of the pool, and any script would cost them its imports."""
    script = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = script


def unique_memory_bytes():
    """This process's unique set size (USS: the pages no other process shares, what ending it
    would free), from Linux's /proc; None elsewhere. Pages of a memory-mapped file count only
    in the page cache, which every rank of the node shares."""
    try:
        lines = open("/proc/self/smaps_rollup").read().splitlines()
    except OSError:
        return None
    fields = (line.split() for line in lines if line.startswith(("Private_Clean", "Private_Dirty")))
    return sum(int(kilobytes) for _, kilobytes, *_ in fields) * 1024


def set_cpu_threads(processes_on_this_host, threads=None):
    """Split the cores between the processes of this host (oversubscribed
    threads spin against each other and run slower than fewer threads)."""
    torch.set_num_threads(threads or share_of_cores(processes_on_this_host))


def rendezvous(timeout):
    """Extra `init_process_group` arguments for how this process was started.

    Plain `python`: a group of one in memory. Under torchrun the workers
    meet in the store its agents keep for the whole job, which outlives a
    restart, and with it the dead workers' keys and addresses: a new gloo
    group could dial them ("Connection refused"). So each attempt gets a key
    prefix of its own, agreed by all ranks (see `_agree_on_attempt`), and the
    job a name that its restarts share (`torchrun_job_key`). Without
    torchrun's agent store (a launcher of your own): the env:// defaults.
    """
    global _job, _store
    if "WORLD_SIZE" not in os.environ:
        return dict(store=dist.HashStore(), rank=0, world_size=1)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        # no store that outlives an attempt: --rdzv-id is the best name the job has
        _job = f"rdzv:{run_id}" if run_id != "none" else None
        return {}  # torch's env:// then starts a new store for every attempt: no stale keys
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = _store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout
    )
    if store.check([FAILED_KEY]):  # see remember_failure
        raise DistributedError(
            f"{store.get(FAILED_KEY).decode()} (an earlier attempt of this torchrun job stopped "
            "on this; its restarts stop at once)"
        )
    # the first worker leaves a name in the store, which lives exactly as long as the job: its
    # restarts read the same name, a new job that reuses an --rdzv-id draws a new one
    _job = "store:" + store.compare_set("partorch/job", "", uuid.uuid4().hex).decode()
    attempt = _agree_on_attempt(store, rank, world_size, timeout)
    return dict(
        store=dist.PrefixStore(f"partorch/attempt{attempt}", store),
        rank=rank,
        world_size=world_size,
    )


_job = None  # set by rendezvous() under torchrun
_store = None  # torchrun's store, which lives as long as the job: set by rendezvous()
FAILED_KEY = "partorch/failed"


def remember_failure(error):
    """Note in torchrun's store a PartorchError that a retry would meet
    again (bad input or set-up; not an UnexpectedError). torchrun restarts
    workers on any failure and cannot be told not to (pytorch/pytorch#133877),
    so --max-restarts N would read the bad input N more times; with this note
    each restart stops at once in `rendezvous`, with the same line, before
    reading or writing anything. The store ends with the job."""
    if _store is not None and not isinstance(error, UnexpectedError):
        _store.set(FAILED_KEY, str(error))


def torchrun_job_key():
    """A name of this torchrun job, the same on every node and after every
    restart; None outside torchrun. Snapshots and run folders carry it, so
    a restarted job finds and resumes its own, and a new job never does,
    even one that reuses an --rdzv-id (it gets a new store, so a new name)."""
    return _job


def is_restart_of(job):
    """Whether this process is torchrun's restart of the job that wrote a
    snapshot naming `job`. A job torchrun gives no name (no --rdzv-id and no
    store shared across attempts) falls back on this node's restart count."""
    if _job is not None:
        return job == _job
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0


def _agree_on_attempt(store, rank, world_size, timeout):
    """A number for this attempt that every rank agrees on and no earlier
    attempt used. Rank 0 draws it from a counter in the store. The others
    cannot trust what they read there (keys of a dead attempt stay behind,
    and TORCHELASTIC_RESTART_COUNT differs between nodes: it counts only the
    restarts a node's own workers caused), so each answers with a fresh
    random nonce, and rank 0 echoes the nonces it received under the number:
    a rank that finds its own nonce there knows the number is this attempt's."""
    if rank == 0:
        attempt = store.add("partorch/attempts", 1)
        store.set("partorch/current", str(attempt))
        acks = [f"partorch/ack/{attempt}/{r}" for r in range(1, world_size)]
        store.wait(acks)  # bounded by the store's timeout: a peer that never comes fails the job
        store.set(f"partorch/go/{attempt}", json.dumps([store.get(key).decode() for key in acks]))
        return attempt
    nonce, deadline = uuid.uuid4().hex, time.monotonic() + timeout.total_seconds()
    while time.monotonic() < deadline:
        attempt = int(
            store.get("partorch/current")
        )  # this attempt's, or a dead one's until rank 0 writes
        store.set(f"partorch/ack/{attempt}/{rank}", nonce)
        for _ in range(20):
            if store.check([f"partorch/go/{attempt}"]):
                if nonce in json.loads(store.get(f"partorch/go/{attempt}")):
                    return attempt
                break  # a dead attempt's answer: read the number again
            time.sleep(0.05)
        time.sleep(0.05)
    raise DistributedError(
        f"rank 0 did not answer within --dist-timeout ({timeout.total_seconds():.0f} s)"
    )


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
        error = (str(exc), isinstance(exc, UnexpectedError))
    except Exception as exc:  # a full disk, a bug: still one line on every rank, details in the log
        log.exception("rank %d failed", dist.get_rank())
        error = (f"rank {dist.get_rank()} failed: {describe(exc)}", True)
    errors = [e for e in all_gather_object(error) if e]
    if errors:
        message, unexpected = errors[0]
        raise (UnexpectedError if unexpected else PartorchError)(message)


def assert_same_on_all_ranks(named_digests):
    """Stop every rank if any rank computed a different digest.

    `named_digests` maps a name ("molecules", "split", "flag --lr") to a
    digest or a short value. Ranks that disagree would train on different
    data, embed tokens differently or drift apart without any error, so
    this runs once at start-up.
    """
    everyone = all_gather_object(named_digests)
    for name in named_digests:
        values = [d[name] for d in everyone]
        if len(set(values)) > 1:
            groups = {v: [r for r, x in enumerate(values) if x == v] for v in values}
            shown = {v: v if len(v) <= 40 else v[:12] for v in groups}  # a flag, or a digest
            detail = "; ".join(f"ranks {ranks}: {shown[v]}" for v, ranks in groups.items())
            raise DistributedError(
                f"ranks disagree on the {name} ({detail}); "
                "do all ranks read the same file with the same flags?"
            )


class Heartbeat:
    """Lets the other ranks wait for work that rank 0 does alone (scoring a
    large dev split, say) for as long as it takes, yet notice within the
    timeout when rank 0 is gone. A collective would end a healthy job once
    the work outlasts --dist-timeout; instead rank 0 broadcasts "still
    working" every few seconds on a group of its own (gloo: CPU tensors even
    beside nccl) and "done" at the end, and each wait is bounded by the
    timeout. A rank 0 alive but stuck beats for ever: after `ceiling` the
    others stop (torchrun then stops rank 0). `enabled=False` (every rank
    works, --distributed-eval): plain calls."""

    def __init__(self, timeout, ceiling, enabled=True):
        self.group = dist.new_group(backend="gloo", timeout=timeout) if enabled else None
        self.interval = min(5.0, timeout.total_seconds() / 4)
        self.ceiling = ceiling.total_seconds()

    def while_rank0_works(self, work):
        """work()'s result on rank 0 (also on the others when disabled), None on the others."""
        if self.group is None:
            return work()
        if dist.get_rank() != 0:
            done, deadline = torch.zeros(1), time.monotonic() + self.ceiling
            while not done.item():
                if time.monotonic() > deadline:
                    raise UnexpectedError(
                        f"rank 0 has been scoring for over {self.ceiling:.0f} s (--eval-timeout): "
                        "stuck, or the split needs a larger --eval-timeout"
                    )
                dist.broadcast(done, src=0, group=self.group)
            return None
        finished = threading.Event()
        beats = threading.Thread(target=self._beat_until, args=(finished,), daemon=True)
        beats.start()
        try:
            return work()
        finally:
            finished.set()
            beats.join()

    def _beat_until(self, finished):
        working, done = torch.zeros(1), torch.ones(1)
        try:
            while not finished.wait(self.interval):
                dist.broadcast(working, src=0, group=self.group)
            dist.broadcast(done, src=0, group=self.group)
        except (RuntimeError, dist.DistError):
            pass  # a peer is gone: rank 0's next collective says so, in one line
