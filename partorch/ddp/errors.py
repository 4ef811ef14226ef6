"""The one exception type for bad input or set-up, and how a command ends on
it: one `error: ...` line on stderr and exit status 2, never a traceback."""

import logging
import os
import re
import sys
import time

import torch


class PartorchError(Exception):
    """Bad input or set-up: reported as one line, never as a traceback; a
    retry would meet it again."""


class DataError(PartorchError):
    """The data cannot be used as given (a file, a column, a row, a batch size)."""


class UnexpectedError(PartorchError):
    """Anything else one rank met (a full disk, out of memory, a bug),
    passed on to every rank as one line: a torchrun restart may get past it."""


class Preempted(Exception):
    """The job was told to end (SIGTERM) and wrote a snapshot where it stopped: not a
    failure of the run, which the same command continues."""


# 128 + SIGTERM: what a shell reports for a process that SIGTERM ended; never 0, so a job
# script that requeues on failure sees that this run did not finish
PREEMPTED_STATUS = 143

# Bad input fails every rank at the same point; torchrun stops the others as
# soon as one exits, so each waits a moment for its peers to say so too.
PEER_GRACE_SECONDS = 2.0


def run_main(main, parser):
    """Parse the flags, call main(args); our errors and a lost peer end as one line. A torchrun
    worker that finished (or wrote its preemption snapshot) ends without the interpreter's
    teardown: see exit_without_teardown."""
    args = parser.parse_args()
    status = 0
    try:
        main(args)
    except Preempted as exc:
        sys.stderr.write(f"{exc}\n")
        status = PREEMPTED_STATUS
    except PartorchError as exc:
        fail(str(exc))
    except OSError as exc:  # a full disk, a quota, a file system gone: the machine's, not a bug
        if is_peer_failure(exc):
            raise
        logging.getLogger("partorch").exception("failed")  # the traceback: in the rank's log
        fail(describe(exc))
    except (torch.distributed.DistError, RuntimeError) as exc:
        if not is_peer_failure(exc):
            raise
        fail(
            "lost contact with another process: it crashed, was killed, or did not answer within "
            f"--dist-timeout ({str(exc).strip().splitlines()[0][:300]})"
        )
    if "LOCAL_RANK" in os.environ:  # a torchrun worker
        exit_without_teardown(status)
    if status:
        sys.exit(status)


def exit_without_teardown(status=0):
    """End a process that has done its work and left the process group with `status`,
    its output and logs flushed, skipping the interpreter's teardown.

    Threads of torch's outlive Python's shutdown: a gloo thread still letting go of the last
    allreduce, the autograd engine's workers. When one is descheduled until teardown has
    begun, it needs the GIL the dying interpreter no longer gives, is ended inside a
    destructor, and std::terminate aborts the finished process ("terminate called without
    an active exception", exit -6): seen in a core dump of a test worker, and once in about
    300 torchrun launches of a CI run, on a rank that had finished training
    (pytorch/pytorch#190489). Everything of ours is written and closed before this point.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class Failure(str):
    """What went wrong on one rank, as a message another rank can re-raise;
    it names the rank."""


class UnexpectedFailure(Failure):
    """A Failure that is no PartorchError (see UnexpectedError)."""


class ReportedError(PartorchError):
    """A Failure re-raised on a rank that received it: its words stay as they are."""


class ReportedUnexpectedError(ReportedError, UnexpectedError):
    pass


def run_or_report(work):
    """work()'s result, or a Failure saying which rank failed and why: for
    work whose result or failure goes to other ranks in a collective, so that
    they can stop with it instead of waiting until the collective times out."""
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    try:
        return work()
    except ReportedError as exc:  # a failure passed on from another rank: already named
        return (UnexpectedFailure if isinstance(exc, UnexpectedError) else Failure)(str(exc))
    except PartorchError as exc:
        return Failure(f"rank {rank} failed: {exc}")
    except Exception as exc:  # a bug: its traceback goes to the log, its one line to every rank
        if is_peer_failure(exc):  # not this rank's fault, and perhaps passing: stays what it is
            raise
        logging.getLogger("partorch").exception("failed")
        return UnexpectedFailure(f"rank {rank} failed: {describe(exc)}")


def raise_if_failed(result):
    """`result`, unless it is a Failure: then raise it here, in the same words."""
    if isinstance(result, Failure):
        unexpected = isinstance(result, UnexpectedFailure)
        raise (ReportedUnexpectedError if unexpected else ReportedError)(str(result))
    return result


def describe(exc):
    """One line for an exception that is no PartorchError: a file's fault names the file."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


def is_peer_failure(exc):
    # gloo reports a dead or silent peer as a plain RuntimeError (an OSError's "timed out" is
    # no peer's doing)
    return isinstance(exc, torch.distributed.DistError) or (
        isinstance(exc, RuntimeError)
        and bool(
            re.search(r"gloo|nccl|connection (closed|reset)|timed out", str(exc), re.IGNORECASE)
        )
    )


def fail(message):
    sys.stderr.write(f"error: {message}\n")  # one write, so ranks do not interleave
    exit_after_peers(2)


def exit_after_peers(status):
    """Exit, after a moment for the peers to report the same error when there are any."""
    sys.stderr.flush()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        time.sleep(PEER_GRACE_SECONDS)
    sys.exit(status)
