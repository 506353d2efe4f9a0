"""Data-parallel training on the CPU: the trainer forks one copy of itself per extra rank.

Why: the planner's models are small, and one process with N intra-op threads scales poorly on them, while
N one-thread processes that average their gradients scale better, most of all on the drafter, whose step
runs the frozen target once per sample (batch 1: small products and Python that threads cannot share).
Measured on the 2-core machine, driving recipe, 9,760 keyframes, side by side (`bench/train.py`): two
one-thread ranks against one process with two threads, target 2.84 against 2.40 steps/s (1.18x), drafter
3.73 against 2.64 (1.41x); docs/decisions/0006-data-parallel-forked-ranks.md.

How: every rank takes its share of the same global batch, and the gradients (and the loss, for the log) are
averaged before the optimiser step, so all ranks step alike and hold identical weights. The ranks are
forked once the data is loaded, so they share it copy-on-write, and the calling process is rank 0: its
model is the one trained, and only it scores, saves and shows progress (a selection's decodes the ranks
may share: `Ranks.gather`, `planning.training.target.SharedSelection`). The other ranks exit when the training
function returns. The processes talk through gloo over the loopback interface; nothing leaves
the machine.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from plan_stack.planning.errors import PlanningError

if TYPE_CHECKING:  # torch is imported on use: `plan-stack train --help` and the rank helpers need none
    import torch

__all__ = ["Ranks", "run_ranks", "check_ranks", "usable_cores", "default_ranks", "training_ranks"]

T = TypeVar("T")

#: how long a rank waits for the others in one collective: rank 0's scoring and saves run while
#: the others wait in their next averaging
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)
#: when rank 0 fails, how long the others get to exit on their own (a rank that failed first is still
#: printing its traceback when rank 0's averaging breaks)
FAILED_RANK_GRACE_S = 2.0


@dataclasses.dataclass(frozen=True)
class Ranks:
    """Where this process stands among the training processes."""

    rank: int = 0
    world: int = 1
    #: torch threads of each rank while they train; `lead_threads`: rank 0's while the others wait on it
    threads: int = 1
    lead_threads: int = 1

    @property
    def lead(self) -> bool:
        """Rank 0: the one that evaluates, saves, logs and returns."""
        return self.rank == 0

    def share(self, batch: Sequence[T]) -> list[T]:
        """This rank's part of the global batch (every rank holds the same global batch)."""
        return list(batch[self.rank::self.world])

    def unshare(self, parts: Sequence[Sequence[T]]) -> list[T]:
        """The global batch back in its order from every rank's part of it (`share`'s inverse), rank by rank."""
        out: list[T] = []
        for i in range(max((len(p) for p in parts), default=0)):
            out += [p[i] for p in parts if i < len(p)]
        return out

    def gather(self, part: T) -> list[T] | None:
        """Every rank's `part`, in rank order, on rank 0 (None on the others); a picklable object each."""
        if self.world == 1:
            return [part]
        import torch

        parts: list[T] | None = [part] * self.world if self.lead else None
        torch.distributed.gather_object(part, parts, dst=0)
        return parts

    def average(self, params: Sequence[torch.nn.Parameter], *values: torch.Tensor) -> list[float]:
        """Average the gradients of `params` over the ranks, in place, and the scalars `values` (returned as
        floats). A parameter without a gradient on one rank counts as a zero gradient there."""
        if self.world == 1:
            return [float(v.detach()) for v in values]
        import torch

        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
                         + [v.detach().reshape(1).to(torch.float32) for v in values])
        torch.distributed.all_reduce(flat)
        flat /= self.world
        offset = 0
        for p in params:
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return flat[offset:].tolist()

    @contextmanager
    def leading(self) -> Iterator[None]:
        """Rank 0 alone at work (an evaluation the ranks do not share) while the others wait: it may use their
        cores too."""
        if self.world == 1 or self.threads == self.lead_threads:
            yield
            return
        import torch

        torch.set_num_threads(self.lead_threads)
        try:
            yield
        finally:
            torch.set_num_threads(self.threads)


def check_ranks(ranks: int, *batch_sizes: int) -> None:
    """A clear error for a rank count the batches cannot be shared by."""
    if ranks < 1:
        raise PlanningError(f"ranks must be >= 1, got {ranks}")
    for b in batch_sizes:
        if b % ranks:
            raise PlanningError(f"{ranks} ranks cannot share a batch of {b} evenly: choose a divisor of {b}")


def run_ranks(world: int, body: Callable[[Ranks], T]) -> T:
    """`body(ranks)` in this process as rank 0 and in `world - 1` forked copies; rank 0's result.

    The ranks share this process's torch threads (at least one each); rank 0 has them all back while it
    works alone (`Ranks.leading`) and afterwards. If any rank fails, this raises."""
    if world <= 1:
        return body(Ranks())
    import torch

    if not torch.distributed.is_available():
        raise PlanningError("data-parallel training needs torch.distributed (gloo); use one rank")
    if torch.distributed.is_initialized():
        raise PlanningError("data-parallel training: this process is already in a process group")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the ranks talk over the loopback interface only
    store_dir = tempfile.mkdtemp(prefix="plan_stack_ranks_")
    init = f"file://{os.path.join(store_dir, 'store')}"
    restore = torch.get_num_threads()
    threads = max(1, restore // world)
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, int] = {}
    for rank in range(1, world):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - a forked rank: coverage does not follow it
            code = 1
            try:
                torch.set_num_threads(threads)
                torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                                     timeout=COLLECTIVE_TIMEOUT)
                body(Ranks(rank, world, threads, restore))
                torch.distributed.barrier()  # the group stays up until every rank is done with it
                # no destroy_process_group here: the process ends at once, which closes its side of the group,
                # while destroying it hung about once in 30 runs after the barrier (a 2-rank stress loop)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[rank] = pid
    try:
        torch.set_num_threads(threads)
        torch.distributed.init_process_group("gloo", init_method=init, rank=0, world_size=world,
                                             timeout=COLLECTIVE_TIMEOUT)
        result = body(Ranks(0, world, threads, restore))
        torch.distributed.barrier()
    except BaseException as exc:
        # a rank that failed first makes rank 0's next averaging fail: name it, not the broken connection
        exited: dict[int, int] = {}
        deadline = time.monotonic() + FAILED_RANK_GRACE_S
        while True:
            for rank, pid in children.items():
                polled = _poll(pid) if rank not in exited else None
                if polled is not None:
                    exited[rank] = polled
            if len(exited) == len(children) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for rank, pid in children.items():
            if rank not in exited:
                _kill(pid)
                _wait(pid)
        failed = {rank: code for rank, code in exited.items() if code != 0}
        if failed and isinstance(exc, Exception):
            raise PlanningError(f"data-parallel training: {_said(failed)}") from exc
        raise
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        torch.set_num_threads(restore)
        shutil.rmtree(store_dir, ignore_errors=True)
    codes = {rank: _wait(pid) for rank, pid in children.items()}
    failed = {rank: code for rank, code in codes.items() if code != 0}
    if failed:
        raise PlanningError(f"data-parallel training: {_said(failed)}")
    return result


def _said(failed: dict[int, int]) -> str:
    return ", ".join(f"rank {r} exited with {c}" for r, c in sorted(failed.items())) + " (its traceback is above)"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _poll(pid: int) -> int | None:
    """The exit code of a forked rank that has exited, else None."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def usable_cores() -> int:
    """The cores this process may run on: training's default torch threads, and recording's worker count."""
    return max(1, len(os.sched_getaffinity(0)))


def default_ranks(threads: int) -> int:
    """Data-parallel ranks for `threads` CPU threads: 1, 2 or 4 (they divide every recipe's batches)."""
    return 4 if threads >= 4 else 2 if threads >= 2 else 1


def training_ranks(requested: int | None, threads: int, device: Any, *batch_sizes: int) -> int:
    """The data-parallel ranks a training command runs (`train`, `train-drafter`): `requested`, or by default
    `default_ranks(threads)` on the CPU where they divide every batch (else 1) and 1 on a GPU. PlanningError
    for a count the batches cannot be shared by, or more than one rank off the CPU."""
    ranks = requested
    if ranks is None:
        ranks = default_ranks(threads) if device.type == "cpu" else 1
        ranks = 1 if any(b % ranks for b in batch_sizes) else ranks
    check_ranks(ranks, *batch_sizes)
    if ranks > 1 and device.type != "cpu":
        raise PlanningError(f"--ranks {ranks}: data-parallel training is for the CPU; on {device} use 1")
    return ranks
