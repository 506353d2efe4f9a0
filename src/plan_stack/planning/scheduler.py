"""Which plan the planner makes next, without ROS: the newest-observation slot, the replan period and the
precedence of plan_request goals.

The planner node plans in one worker thread, so that it keeps serving (diagnostics, goals, cancels) while a
plan is made. Observations arrive faster than plans are made, and only the newest is worth planning from:

* an observation older than `max_observation_age_s` by the node clock (`STALE`), or stamped that far ahead
  of it (`FUTURE`: a wrong clock, or sent before a simulator reset), is never planned from; the age is
  checked again when the worker takes it (`begin`);
* one that arrives while another waits replaces it (`SUPERSEDED`), never queues behind it;
* `replan_period_s`: one stamped less than this after the observation planned last (and not before it:
  that is a reset or a bag loop) is not planned from (`RECENT`: the plan in force is recent enough); it is
  still the newest a plan_request plans from;
* a plan_request goal is taken before a waiting observation (a plan in progress is not interrupted), one
  request at a time;
* a clock reset (`clock_reset`: a simulator reset) drops the waiting and the newest observation and cancels
  the plan in progress from an observation: they belong to the world before the reset.

Threads: `offer` from the observation callback, `request` and `busy` from the action server's callbacks,
`next_job`, `begin` and `finish` from the worker only, `close`, `clock_reset` and `stopping` from any thread.
Each takes the
one lock; a `Job`'s events and text list are how the worker and the goal's thread talk while it runs.
"""
from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plan_stack.planning.runtime import FrameInput, PlanOutput

__all__ = ["Job", "Offered", "Offer", "PlanScheduler"]

#: Stamps closer than this to the end of the replan period count as past it (float round-off of stamps).
_PERIOD_EPS_S = 1e-9


@dataclasses.dataclass
class Job:
    """One plan to make: from an observation, or for a plan_request goal."""

    frame: FrameInput
    stamp: Any  # the observation's header stamp, handed back untouched for the plan's header
    instruction: str
    kinds: tuple[str, ...] = ()
    request: bool = False
    texts: list[str] = dataclasses.field(default_factory=list)  # sub-task text after each decoding step
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    output: PlanOutput | None = None
    error: str = ""

    def add_text(self, text: str) -> None:
        """The worker's sub-task text after a decoding step; a repeat of the last one is not added.
        (list.append is atomic: the goal's thread reads the list by index meanwhile.)"""
        if not self.texts or self.texts[-1] != text:
            self.texts.append(text)

    def wait(self, should_cancel: Callable[[], bool], on_text: Callable[[str], None], poll_s: float = 0.02) -> None:
        """Block until the worker is done with this job (a plan_request goal's thread). Each sub-task text the
        worker adds goes to `on_text`, in order, within `poll_s`; once `should_cancel()` (checked every
        `poll_s`) the job is cancelled, and the worker stops at its next decoding step."""
        sent = 0

        def flush() -> int:
            texts = self.texts[sent:]
            for text in texts:
                on_text(text)
            return sent + len(texts)

        while not self.done.wait(poll_s):
            if should_cancel():
                self.cancel.set()
            sent = flush()
        flush()


class Offered(enum.Enum):
    """What became of an observation offered to the scheduler."""

    QUEUED = "queued"  # the worker plans from it next (unless a newer one replaces it)
    SUPERSEDED = "superseded"  # queued, replacing one that was still waiting
    RECENT = "recent"  # not queued: the plan in force is recent enough (replan_period_s)
    STALE = "stale"  # refused: older than max_observation_age_s
    FUTURE = "future"  # refused: stamped more than max_observation_age_s ahead of the clock


@dataclasses.dataclass(frozen=True)
class Offer:
    outcome: Offered
    message: str = ""  # why it was refused (STALE, FUTURE)


class PlanScheduler:
    """The planner's job slots (see the module doc). `clock()` is the node clock in seconds (sim time aware),
    the time base of observation stamps."""

    def __init__(self, replan_period_s: float, max_observation_age_s: float, clock: Callable[[], float]) -> None:
        self.replan_period_s = float(replan_period_s)
        self.max_observation_age_s = float(max_observation_age_s)
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: Job | None = None  # the newest observation waiting for the worker
        self._request: Job | None = None  # the plan_request goal waiting or being planned
        self._latest: tuple[FrameInput, Any, str] | None = None  # newest fresh observation (frame, stamp, text)
        self._last_planned_s: float | None = None  # stamp of the observation planned from last
        self._running: Job | None = None  # the job the worker is on
        self._stopping = threading.Event()

    # --- observations (subscription thread) ---------------------------------------------

    def offer(self, frame: FrameInput, stamp: Any, instruction: str) -> Offer:
        """A checked observation arrived: keep it as the newest, and queue it unless the period says not yet."""
        age = self._clock() - frame.stamp_s
        limit = self.max_observation_age_s
        if age > limit:
            return Offer(Offered.STALE, f"stale observation: {age:.3f} s old (max_observation_age_s {limit})")
        if -age > limit:
            return Offer(Offered.FUTURE, f"observation stamped {-age:.3f} s ahead of the node clock "
                                         f"(max_observation_age_s {limit})")
        with self._cond:
            self._latest = (frame, stamp, instruction)
            last = self._last_planned_s
            if last is not None and last <= frame.stamp_s < last + self.replan_period_s - _PERIOD_EPS_S:
                return Offer(Offered.RECENT)
            outcome = Offered.SUPERSEDED if self._pending is not None else Offered.QUEUED
            self._pending = Job(frame, stamp, instruction)
            self._cond.notify()
        return Offer(outcome)

    # --- plan_request goals (action server threads) -------------------------------------

    @property
    def busy(self) -> bool:
        """A plan_request goal is waiting or being planned (another one is refused)."""
        with self._cond:
            return self._request is not None

    def request(self, instruction: str, kinds: tuple[str, ...]) -> Job | str:
        """Queue a plan_request goal on the newest observation (`instruction` empty: the observation's);
        the job to wait on, or why there is none."""
        with self._cond:
            latest = self._latest
        if latest is None:
            return "no observation received yet"
        age = self._clock() - latest[0].stamp_s
        if age > self.max_observation_age_s:
            return f"newest observation is {age:.3f} s old (max_observation_age_s {self.max_observation_age_s})"
        frame, stamp, obs_instruction = latest
        job = Job(frame, stamp, instruction or obs_instruction, tuple(kinds), request=True)
        with self._cond:
            if self._request is not None:
                return "another request is being planned"
            self._request = job
            self._cond.notify()
        return job

    # --- the worker ---------------------------------------------------------------------

    def next_job(self, poll_s: float = 0.5) -> Job | None:
        """Block until there is a job (a request before an observation); None once stopping."""
        while not self._stopping.is_set():
            with self._cond:
                while self._request is None and self._pending is None and not self._stopping.is_set():
                    self._cond.wait(poll_s)
                if self._stopping.is_set():
                    return None
                job = self._request if self._request is not None else self._pending
                if job is None:
                    continue
                if job is self._pending:
                    self._pending = None
                self._running = job
                return job
        return None

    def begin(self, job: Job) -> str:
        """The worker starts `job`: an observation that aged past `max_observation_age_s` while it waited is
        not planned from (returns why); otherwise its stamp is the one planned last (returns "")."""
        if not job.request:
            age = self._clock() - job.frame.stamp_s
            if age > self.max_observation_age_s:
                return (f"stale observation: {age:.3f} s old when the planner was free (max_observation_age_s "
                        f"{self.max_observation_age_s})")
        with self._cond:
            self._last_planned_s = job.frame.stamp_s
        return ""

    def finish(self, job: Job) -> None:
        """The worker is done with `job` (planned, skipped or failed): its waiter wakes, a request's slot frees."""
        job.done.set()
        with self._cond:
            if job.request:
                self._request = None
            if self._running is job:
                self._running = None

    # --- clock resets -------------------------------------------------------------------

    def clock_reset(self) -> None:
        """Time went back (a simulator reset): the observations held and the plan being made from one are of
        the world before it. A plan_request goal in progress is left to finish (its caller asked for it)."""
        with self._cond:
            self._pending = None
            self._latest = None
            self._last_planned_s = None
            running = self._running
        if running is not None and not running.request:
            running.cancel.set()

    # --- shutdown -----------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def close(self) -> None:
        """Stop: `next_job` returns None, and the jobs waiting or running are cancelled (a plan in progress
        stops at its next decoding step). Idempotent."""
        self._stopping.set()
        with self._cond:
            for job in (self._request, self._pending):
                if job is not None:
                    job.cancel.set()
            self._cond.notify_all()
