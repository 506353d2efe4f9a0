"""RTC runtime: where the previous chunk is on the execution timeline (`align_previous`), how many
control steps the next inference will take (`DelayEstimator`), the constraint d <= s <= H - d
(`plan_horizon`), and one chunker's state (`RtcRuntime`). The delay clamping contract is in the
`plan_stack.actions.rtc` package docstring.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import math

import numpy as np

from plan_stack.actions.errors import RtcError
from plan_stack.actions.rtc.guides import Schedule
from plan_stack.config import ConfigError, param, validate

__all__ = ["Method", "RtcConfig", "AlignedPrefix", "align_previous", "DelayEstimator", "HorizonPlan",
           "plan_horizon", "RtcRequest", "RtcRuntime"]


class Method(str, enum.Enum):
    NAIVE = "naive"
    HARD_PREFIX = "hard_prefix"
    TRAINING_TIME = "training_time"
    TEST_TIME_VJP = "test_time_vjp"
    TEST_TIME_DIRECT = "test_time_direct"

    @property
    def uses_prefix_conditioning(self) -> bool:
        return self in (Method.HARD_PREFIX, Method.TRAINING_TIME)

    @property
    def uses_guidance(self) -> bool:
        return self in (Method.TEST_TIME_VJP, Method.TEST_TIME_DIRECT)


@dataclasses.dataclass(frozen=True)
class RtcConfig:
    """RTC settings of one chunker (runtime + inference method)."""

    method: str = param("RTC method", "training_time", choices=[m.value for m in Method])
    execution_horizon_steps: int = param(
        "s: control steps executed from each chunk before the next query (d <= s <= H - d enforced)",
        25, min=1)
    schedule: str = param("test-time guidance weight schedule over the overlap region", "exp",
                          choices=[s.value for s in Schedule])
    max_guidance_weight: float = param("beta: upper bound on the test-time guidance weight", 5.0, min=0.0)
    delay_window: int = param("number of recent inference delays the estimate is taken over", 20, min=1)
    delay_quantile: float = param("quantile of the window used as the delay estimate", 0.95, min=0.5, max=1.0)
    cold_start_samples: int = param("first inferences excluded from the delay estimate (warm-up)", 1, min=0)
    initial_delay_steps: float = param("delay estimate (control steps) before any warm measurement", 2.0,
                                       min=0.0)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def method_enum(self) -> Method:
        return Method(self.method)


# --- runtime: alignment ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AlignedPrefix:
    """The previous chunk seen from a new query time.

    `actions[k]` is the previous chunk at `t_query + k dt` (linear
    interpolation between its samples), for k < `valid_len`; later rows hold
    its last sample (never zeros). `prefix_len` <= `valid_len`.
    """

    actions: np.ndarray  # [H_out, D]
    valid_len: int
    prefix_len: int
    delta_steps: float


#: tolerance on delta (in steps) so float time arithmetic does not lose a sample
_DELTA_EPS = 1e-6


def align_previous(previous: np.ndarray, t_ref_s: float, t_query_s: float, dt_s: float,
                   prefix_len: int, horizon: int | None = None) -> AlignedPrefix:
    """Resample the remaining suffix of `previous` [H, D] from delta = (t_query - t_ref)/dt.

    delta may be fractional; the requested prefix length is clamped to the
    number of samples that remain. Raises RtcError when the query precedes
    the previous chunk or inputs are not finite.
    """
    prev = np.asarray(previous, dtype=float)
    if prev.ndim != 2 or prev.shape[0] < 1:
        raise RtcError(f"previous: expected [H, D] with H >= 1, got shape {prev.shape}")
    if not np.all(np.isfinite(prev)):
        raise RtcError("previous: chunk contains non-finite values")
    if not (dt_s > 0 and math.isfinite(dt_s)):
        raise RtcError(f"dt_s: must be > 0, got {dt_s!r}")
    if prefix_len < 0:
        raise RtcError(f"prefix_len: must be >= 0, got {prefix_len}")
    h_prev = prev.shape[0]
    h_out = h_prev if horizon is None else int(horizon)
    delta = (t_query_s - t_ref_s) / dt_s
    if not math.isfinite(delta) or delta < -_DELTA_EPS:
        raise RtcError(f"t_query_s: query {t_query_s!r} precedes the previous chunk's start {t_ref_s!r}")
    delta = max(delta, 0.0)
    last = h_prev - 1
    valid = 0 if delta > last + _DELTA_EPS else min(int(math.floor(last - delta + _DELTA_EPS)) + 1, h_out)
    out = np.repeat(prev[last:], h_out, axis=0)
    if valid:
        pos = np.minimum(delta + np.arange(valid), last)
        i0 = np.floor(pos + _DELTA_EPS).astype(int).clip(0, last)
        frac = np.clip(pos - i0, 0.0, 1.0)[:, None]
        i1 = np.minimum(i0 + 1, last)
        out[:valid] = (1.0 - frac) * prev[i0] + frac * prev[i1]
    return AlignedPrefix(out, valid, min(prefix_len, valid), delta)


# --- runtime: delay estimation ----------------------------------------------------------------------


class DelayEstimator:
    """Inference delay in control steps: a high quantile over recent measurements.

    Each observation is `max(inference_s / dt, consumed_steps)`: the wall time
    of the inference, and (when known) the control steps that actually elapsed
    on the execution timeline between the query and the chunk's arrival (which
    also counts transport and queueing). The first `cold_start` observations
    (graph warm-up, allocator growth) are excluded; before any warm sample
    the estimate is `initial_steps`.
    """

    def __init__(self, dt_s: float, window: int = 20, quantile: float = 0.95, cold_start: int = 1,
                 initial_steps: float = 0.0) -> None:
        if not dt_s > 0:
            raise RtcError(f"dt_s: must be > 0, got {dt_s!r}")
        if window < 1 or not 0.0 <= quantile <= 1.0 or cold_start < 0 or initial_steps < 0:
            raise RtcError("window >= 1, 0 <= quantile <= 1, cold_start >= 0 and initial_steps >= 0 required")
        self.dt_s = dt_s
        self.quantile = quantile
        self.cold_start = cold_start
        self.initial_steps = initial_steps
        self._samples: collections.deque[float] = collections.deque(maxlen=window)
        self._seen = 0

    def observe(self, inference_s: float, consumed_steps: float | None = None) -> None:
        if not (math.isfinite(inference_s) and inference_s >= 0):
            raise RtcError(f"inference_s: must be finite and >= 0, got {inference_s!r}")
        if consumed_steps is not None and not (math.isfinite(consumed_steps) and consumed_steps >= 0):
            raise RtcError(f"consumed_steps: must be finite and >= 0, got {consumed_steps!r}")
        self._seen += 1
        if self._seen <= self.cold_start:
            return
        sample = inference_s / self.dt_s
        if consumed_steps is not None:
            sample = max(sample, consumed_steps)
        self._samples.append(sample)

    @property
    def num_samples(self) -> int:
        return len(self._samples)

    def estimate(self) -> float:
        """Delay in (fractional) control steps."""
        if not self._samples:
            return self.initial_steps
        return float(np.quantile(np.fromiter(self._samples, float), self.quantile, method="higher"))

    def steps(self) -> int:
        """Delay rounded up to whole control steps (the prefix the next chunk must lock)."""
        return int(math.ceil(self.estimate() - 1e-9))

    def reset(self) -> None:
        self._samples.clear()
        self._seen = 0


@dataclasses.dataclass(frozen=True)
class HorizonPlan:
    """Delay d and execution horizon s that satisfy d <= s <= H - d."""

    delay_steps: int
    execution_steps: int
    clamped: bool  # d had to be reduced below the estimate


def plan_horizon(delay_steps: int, execution_steps: int, horizon: int,
                 max_trained_delay: int | None = None) -> HorizonPlan:
    """Enforce d <= s <= H - d (see the module docstring for the clamping contract).

    `max_trained_delay` is the exclusive bound D of the simulated delays the
    model was trained with (training-time RTC), or None when unbounded.
    """
    if horizon < 1 or execution_steps < 1 or delay_steps < 0:
        raise RtcError(f"need horizon >= 1, execution_steps >= 1, delay_steps >= 0; got "
                       f"{horizon}, {execution_steps}, {delay_steps}")
    d_max = horizon // 2
    if max_trained_delay is not None:
        d_max = min(d_max, max(max_trained_delay - 1, 0))
    d = min(delay_steps, d_max)
    s = min(max(execution_steps, d, 1), horizon - d)
    return HorizonPlan(d, s, d < delay_steps)


# --- runtime: one chunker's RTC state --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RtcRequest:
    """What the next inference needs: the aligned previous chunk and how much of it to lock."""

    t_query_s: float
    prefix: np.ndarray | None  # [H, D] aligned previous chunk (robot units), None without one
    prefix_len: int  # d: positions locked (prefix conditioning) or weighted 1 (guidance)
    region_end: int  # overlap with the previous chunk (guidance weights end here)
    delay_steps: float  # raw estimate before clamping (fractional control steps)
    execution_steps: int  # s in force after this query
    clamped: bool  # the estimate exceeded what the model/horizon supports
    delta_steps: float  # offset of the query into the previous chunk


class RtcRuntime:
    """RTC state of one chunker: previous raw chunk, its timeline and the delay estimate.

    Not thread-safe: one caller (the chunker's inference callback) owns it.
    Call `request(t_query)` before inference and `commit(...)` with the raw
    chunk the head produced (robot units, prefix included) after it.
    """

    def __init__(self, cfg: RtcConfig, horizon: int, dt_s: float, max_trained_delay: int | None = None) -> None:
        if cfg.execution_horizon_steps > horizon:
            raise ConfigError(f"execution_horizon_steps: {cfg.execution_horizon_steps} exceeds the horizon "
                              f"{horizon}")
        self.cfg = cfg
        self.horizon = horizon
        self.dt_s = dt_s
        self.method = cfg.method_enum
        # Only a delay-trained model has a trained range; guidance and hard prefixes do not.
        self.max_trained_delay = max_trained_delay if self.method is Method.TRAINING_TIME else None
        self.estimator = DelayEstimator(dt_s, cfg.delay_window, cfg.delay_quantile, cfg.cold_start_samples,
                                        cfg.initial_delay_steps)
        self._prev: np.ndarray | None = None
        self._prev_t_ref_s = 0.0
        self._s = cfg.execution_horizon_steps

    def reset(self) -> None:
        """Forget the previous chunk (after a stop or a stale plan); the estimate is kept."""
        self._prev = None

    @property
    def has_previous(self) -> bool:
        return self._prev is not None

    def next_query_s(self) -> float | None:
        """When the next chunk is due on the execution timeline (None: due now)."""
        if self._prev is None:
            return None
        return self._prev_t_ref_s + self._s * self.dt_s

    def request(self, t_query_s: float) -> RtcRequest:
        estimate = self.estimator.estimate()
        plan = plan_horizon(int(math.ceil(estimate - 1e-9)), self.cfg.execution_horizon_steps, self.horizon,
                            self.max_trained_delay)
        if self._prev is None or self.method is Method.NAIVE:
            return RtcRequest(t_query_s, None, 0, 0, estimate, plan.execution_steps, plan.clamped, 0.0)
        aligned = align_previous(self._prev, self._prev_t_ref_s, t_query_s, self.dt_s, plan.delay_steps,
                                 self.horizon)
        if aligned.valid_len == 0:  # the previous chunk has run out: nothing to continue from
            return RtcRequest(t_query_s, None, 0, 0, estimate, plan.execution_steps, plan.clamped,
                              aligned.delta_steps)
        return RtcRequest(t_query_s, aligned.actions, aligned.prefix_len, aligned.valid_len, estimate,
                          plan.execution_steps, plan.clamped, aligned.delta_steps)

    def commit(self, request: RtcRequest, chunk: np.ndarray, inference_s: float,
               consumed_steps: float | None = None) -> None:
        """Record the raw chunk (sample 0 at `request.t_query_s`) and the measured delay."""
        chunk = np.asarray(chunk, dtype=float)
        if chunk.ndim != 2 or chunk.shape[0] != self.horizon:
            raise RtcError(f"chunk: expected [{self.horizon}, D], got shape {chunk.shape}")
        self._prev = chunk.copy()
        self._prev_t_ref_s = request.t_query_s
        self._s = request.execution_steps
        self.estimator.observe(inference_s, consumed_steps)
