"""Real-Time Chunking (RTC) for flow-matching action chunks (DESIGN section 5).

Three layers, so the algorithm works with any velocity model:

1. **Guides** (`Unguided`, `PrefixConditioning`, `Guidance`) wrap any velocity
   function `v = fn(x [B, H, D], t [B, H])`; they only change what one
   integration step sees (per-position flow time, guided velocity) and what
   is imposed after it (the locked prefix).
2. **One Euler loop** (`integrate`) shared by every method.
3. **The runtime** (`align_previous`, `DelayEstimator`, `RtcRuntime`): where
   the previous chunk is on the execution timeline, how many control steps
   the next inference will take, and the constraint d <= s <= H - d.

Flow time follows pi0: `x_t = (1 - t) a + t eps`, target velocity
`u = eps - a`, sampling runs from t = 1 (noise) to t = 0 (clean) in N Euler
steps `x <- x - (1/N) v`. The clean-time value is therefore **0**; the
implied clean estimate is `a_hat = x_t - t v`. Black et al. (2025) write
their guidance in data time tau = 1 - t (tau = 1 clean); we convert at the
one place it matters (`guidance_weight`).

Methods (`Method`): `naive` (no RTC), `hard_prefix` (prefix conditioning on a
model trained without simulated delays), `training_time` (simulated-delay
training + prefix conditioning), `test_time_vjp` (guidance through the
denoiser's Jacobian) and `test_time_direct` (the Jacobian replaced by the
identity: the weighted prefix error is added to the velocity). A single
query uses either prefix conditioning or guidance, never both.

Delay beyond what the model or horizon supports (documented contract): the
delay estimate d is clamped to the largest value the method can honour,
`min(max_trained_delay - 1, floor(H / 2))` for prefix conditioning with a
delay-trained model and `floor(H / 2)` otherwise; the request is flagged
`clamped` (the chunker reports a WARN diagnostic). The commands executed
during the unaccounted part of the delay then come from the new chunk's
unlocked positions, so the seam is no longer guaranteed continuous there;
the stitcher's bridge absorbs it. The execution horizon is raised to d when
d > s (a query every s < d steps would overlap inferences) and lowered to
H - d when s > H - d (the previous chunk would run out before the prefix).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import math
from typing import Callable, Protocol

import numpy as np
import torch

from plan_stack.actions.errors import RtcError
from plan_stack.config import ConfigError, param, validate

__all__ = [
    "Method", "Schedule", "RtcConfig", "AlignedPrefix", "align_previous", "DelayEstimator",
    "HorizonPlan", "plan_horizon", "prefix_weights", "guidance_weight",
    "sample_delays", "training_time_inputs", "masked_flow_loss",
    "VelocityFn", "Guide", "Unguided", "PrefixConditioning", "Guidance", "integrate",
    "RtcRequest", "RtcRuntime",
]

#: x [B, H, D], per-position flow time t [B, H] -> velocity [B, H, D]
VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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


class Schedule(str, enum.Enum):
    EXP = "exp"
    LINEAR = "linear"
    ONES = "ones"
    ZEROS = "zeros"


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


# --- test-time guidance weights --------------------------------------------------------------------


def prefix_weights(prefix_len: int, region_end: int, horizon: int, schedule: Schedule | str) -> np.ndarray:
    """Per-position guidance weights w [H]: 1 on the locked prefix, decaying to 0 at `region_end`.

    With d = prefix_len, e = region_end (exclusive end of the overlap with the
    previous chunk) and i the position:
    `linear`: clip((d - 1 - i)/(e - d + 1) + 1, 0, 1); `exp`: w_lin (e^w_lin - 1)/(e - 1);
    `ones`: 1; `zeros`: 1 only for i < d. Every schedule is 0 for i >= e.
    """
    schedule = Schedule(schedule)
    if not 0 <= region_end <= horizon or prefix_len < 0:
        raise RtcError(f"need 0 <= region_end <= horizon and prefix_len >= 0; got {region_end}, {horizon}, "
                       f"{prefix_len}")
    i = np.arange(horizon, dtype=float)
    d = min(prefix_len, region_end)
    if schedule is Schedule.ONES:
        w = np.ones(horizon)
    elif schedule is Schedule.ZEROS:
        w = (i < d).astype(float)
    else:
        w = np.clip((d - 1 - i) / (region_end - d + 1) + 1.0, 0.0, 1.0)
        if schedule is Schedule.EXP:
            w = w * np.expm1(w) / (math.e - 1.0)
    w[i >= region_end] = 0.0
    return w


def guidance_weight(t: float, beta: float) -> float:
    """Black et al.'s guidance weight, min(((1 - tau)/tau) (tau^2 + (1 - tau)^2)/(1 - tau)^2, beta).

    tau = 1 - t is their data time; at either end (the expression is infinite
    there) the weight is beta.
    """
    tau = 1.0 - t
    if tau <= 0.0 or tau >= 1.0:
        return float(beta)
    return float(min((1.0 - tau) / tau * (tau**2 + (1.0 - tau) ** 2) / (1.0 - tau) ** 2, beta))


# --- training-time RTC -----------------------------------------------------------------------------


def sample_delays(batch: int, max_delay: int, generator: torch.Generator | None = None,
                  distribution: str = "uniform", temperature: float = 1.0) -> torch.Tensor:
    """Simulated delays d in {0, ..., max_delay - 1} (exclusive bound), [B] int64.

    `uniform`, or `exp`: p(d) proportional to exp(-d / temperature).
    """
    if max_delay < 1:
        raise RtcError(f"max_delay: must be >= 1, got {max_delay}")
    if distribution == "uniform":
        p = torch.ones(max_delay)
    elif distribution == "exp":
        if not temperature > 0:
            raise RtcError(f"temperature: must be > 0, got {temperature!r}")
        p = torch.exp(-torch.arange(max_delay, dtype=torch.float64) / temperature).float()
    else:
        raise RtcError(f"distribution: {distribution!r} is not one of ['uniform', 'exp']")
    return torch.multinomial(p, batch, replacement=True, generator=generator)


def training_time_inputs(actions: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
                         delays: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Noisy input, per-position time and loss mask for simulated-delay training.

    actions, noise [B, H, D]; t [B]; delays [B]. Positions j < d get the clean
    time (0) and their clean action, and no loss. Returns x_t [B, H, D],
    times [B, H], loss mask [B, H] (1 = supervised).
    """
    b, h, _ = actions.shape
    prefix = torch.arange(h, device=actions.device)[None, :] < delays[:, None]
    times = torch.where(prefix, torch.zeros((), dtype=t.dtype), t[:, None].expand(b, h))
    x_t = (1.0 - times)[..., None] * actions + times[..., None] * noise
    return x_t, times, (~prefix).to(actions.dtype)


def masked_flow_loss(v_pred: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor,
                     mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error to u = eps - a over supervised positions (mask [B, H])."""
    err = (v_pred - (noise - actions)).pow(2).mean(dim=-1)  # [B, H]
    if mask is None:
        return err.mean()
    return (err * mask).sum() / mask.sum().clamp(min=1.0)


# --- guides and the one Euler loop ------------------------------------------------------------------


class Guide(Protocol):
    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor: ...

    def project(self, x: torch.Tensor) -> torch.Tensor: ...


def _times(x: torch.Tensor, t: float) -> torch.Tensor:
    return torch.full(x.shape[:2], t, dtype=x.dtype, device=x.device)


class Unguided:
    """Plain flow sampling."""

    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor:
        return fn(x, _times(x, t))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return x


class PrefixConditioning:
    """Inpainting by construction: the first L positions are the aligned prefix, at clean time.

    The prefix is imposed before the first step, after every step and after
    the last, so the returned prefix equals it exactly.
    """

    def __init__(self, prefix: torch.Tensor, prefix_len: int) -> None:
        self.prefix = prefix  # [B, H, D] (only the first prefix_len positions are used)
        self.prefix_len = int(prefix_len)

    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor:
        times = _times(x, t)
        times[:, : self.prefix_len] = 0.0
        return fn(x, times)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        if self.prefix_len == 0:
            return x
        x = x.clone()
        x[:, : self.prefix_len] = self.prefix[:, : self.prefix_len]
        return x


class Guidance:
    """Test-time RTC: steer the clean estimate a_hat = x - t v toward the prefix.

    correction = J^T (w * (y - a_hat)) with J = d a_hat / d x (VJP through the
    denoiser) or J = I (direct); v_guided = v - g(t) correction, g(t) =
    `guidance_weight(t, beta)` (minus: our integration subtracts v). beta = 0
    gives exactly the unguided velocity.
    """

    def __init__(self, prefix: torch.Tensor, weights: torch.Tensor, beta: float, vjp: bool = True) -> None:
        self.prefix = prefix  # [B, H, D]
        self.weights = weights.to(prefix.dtype)[None, :, None]  # [1, H, 1]
        self.beta = float(beta)
        self.vjp = vjp

    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor:
        times = _times(x, t)
        g = guidance_weight(t, self.beta)
        if self.vjp:
            with torch.enable_grad():
                xr = x.detach().requires_grad_(True)
                v = fn(xr, times)
                a_hat = xr - t * v
                err = ((self.prefix - a_hat) * self.weights).detach()
                (corr,) = torch.autograd.grad(a_hat, xr, grad_outputs=err)
            v = v.detach()
        else:
            v = fn(x, times)
            corr = (self.prefix - (x - t * v)) * self.weights
        return v - g * corr

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return x


def integrate(fn: VelocityFn, noise: torch.Tensor, num_steps: int, guide: Guide | None = None) -> torch.Tensor:
    """Euler integration from t = 1 (noise [B, H, D]) to t = 0; returns the clean sample."""
    if num_steps < 1:
        raise RtcError(f"num_steps: must be >= 1, got {num_steps}")
    guide = guide or Unguided()
    step = 1.0 / num_steps
    x = guide.project(noise)
    for k in range(num_steps):
        t = 1.0 - k * step
        x = x - step * guide.velocity(fn, x, t)
        x = guide.project(x)
    return x


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
