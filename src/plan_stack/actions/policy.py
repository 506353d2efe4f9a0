"""Chunk sampling in robot units: normalise, pick the RTC guide, integrate, denormalise.

The single entry point the chunker node and the benchmark share, so both run
exactly the same inference path.
"""
from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from plan_stack.actions.errors import ActionsError
from plan_stack.actions.head import Context, FlowHead
from plan_stack.actions.rtc.guides import Guidance, PrefixConditioning, Schedule, Unguided, prefix_weights
from plan_stack.actions.rtc.runtime import Method, RtcRequest
from plan_stack.actions.rtc.sampling import integrate

__all__ = ["ChunkResult", "ChunkPolicy"]


@dataclasses.dataclass(frozen=True)
class ChunkResult:
    positions: np.ndarray  # [H, D] robot units
    prefix_len: int  # positions locked to (prefix conditioning) or guided toward (guidance) the previous chunk
    inference_ms: float


class VelocityModule(torch.nn.Module):
    """Flat-tensor wrapper of `FlowHead.velocity` so it can be traced and frozen."""

    def __init__(self, head: FlowHead) -> None:
        super().__init__()
        self.head = head

    def forward(self, x: torch.Tensor, t: torch.Tensor, state_token: torch.Tensor, *kv: torch.Tensor) -> torch.Tensor:
        pairs = [(kv[2 * i], kv[2 * i + 1]) for i in range(len(kv) // 2)]
        return self.head.velocity(x, t, Context(state_token, pairs, None))


class ChunkPolicy:
    """A trained head plus its RTC method; `sample` is the hot path (no grad unless VJP guidance).

    `fast=True` runs the velocity model as a frozen TorchScript trace (about
    2x less CPU per step than eager: fused ops, no Python per layer), traced
    on first use or by `warm_up` (the trace does not depend on the number of
    conditioning tokens: they only enter attention); VJP guidance needs
    autograd and always runs eagerly. Outputs equal the eager model's to
    round-off. The trace freezes the weights: build a new policy after
    changing them.
    """

    def __init__(self, head: FlowHead, method: Method | str = Method.NAIVE, schedule: Schedule | str = "exp",
                 max_guidance_weight: float = 5.0, num_steps: int | None = None, fast: bool = False,
                 engine: Callable[..., torch.Tensor] | None = None, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, noise_scale: float = 1.0) -> None:
        if not (math.isfinite(noise_scale) and 0.0 <= noise_scale <= 1.0):
            raise ActionsError(f"noise_scale: must be in [0, 1], got {noise_scale!r}")
        self.device = torch.device(device)
        self.dtype = dtype
        #: the drawn start noise is scaled by this (a `noise` given to `sample` is used as given): 1 samples
        #: the learned distribution; 0 starts every chunk at the noise's mean, one deterministic chunk per
        #: (state, plan), near the distribution's mode (measured in closed loop: fewer chunks that wander
        #: between modes of the demonstrations)
        self.noise_scale = float(noise_scale)
        self.head = head.eval().to(self.device, dtype)
        self.cfg = head.cfg
        self.method = Method(method)
        self.schedule = Schedule(schedule)
        self.beta = float(max_guidance_weight)
        self.num_steps = num_steps or head.cfg.num_steps
        if engine is not None and self.method is Method.TEST_TIME_VJP:
            raise ActionsError("test_time_vjp guidance needs autograd through the head: use backend torch")
        #: an exported flow step (`engines.runtime.EngineSet.flow_step`) in place of the PyTorch velocity model
        self.engine = engine
        self.fast = (fast and engine is None and self.method is not Method.TEST_TIME_VJP and self.device.type == "cpu"
                     and dtype == torch.float32)
        self._traced: torch.jit.ScriptModule | None = None

    def warm_up(self, tokens: int = 1) -> float:
        """Trace (fast path) and run one chunk so the first real query is not slow; returns its ms."""
        return self.sample(np.zeros(self.cfg.state_dim), np.zeros((tokens, self.cfg.cond_width)),
                           generator=torch.Generator().manual_seed(0)).inference_ms

    def _velocity_fn(self, ctx: Context):
        flat = [ctx.state_token] + [a for pair in ctx.kv for a in pair]
        if self.engine is not None:
            engine = self.engine
            return lambda x, t: engine(x, t, *flat)
        if not self.fast:
            return lambda x, t: self.head.velocity(x, t, ctx)
        traced = self._traced
        if traced is None:
            h = self.cfg.horizon
            example = (torch.zeros(1, h, self.cfg.action_dim), torch.full((1, h), 0.5), *flat)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer warnings about Python ints: shapes are fixed here
                traced = torch.jit.optimize_for_inference(
                    torch.jit.freeze(torch.jit.trace(VelocityModule(self.head).eval(), example)))
            self._traced = traced
        return lambda x, t: traced(x, t, *flat)

    def _check(self, state: np.ndarray, cond: np.ndarray) -> None:
        if state.shape != (self.cfg.state_dim,):
            raise ActionsError(f"state: expected shape ({self.cfg.state_dim},), got {state.shape}")
        if cond.ndim != 2 or cond.shape[1] != self.cfg.cond_width or cond.shape[0] < 1:
            raise ActionsError(f"cond: expected [tokens >= 1, {self.cfg.cond_width}], got {cond.shape}")
        if not (np.all(np.isfinite(state)) and np.all(np.isfinite(cond))):
            raise ActionsError("state/cond: non-finite values")

    def sample(self, state: np.ndarray, cond: np.ndarray, request: RtcRequest | None = None,
               generator: torch.Generator | None = None, noise: torch.Tensor | None = None) -> ChunkResult:
        """One chunk for robot `state` [S] and conditioning tokens `cond` [K, W]."""
        state = np.asarray(state, dtype=np.float32)
        cond = np.asarray(cond, dtype=np.float32)
        self._check(state, cond)
        h, d = self.cfg.horizon, self.cfg.action_dim
        t0 = time.perf_counter()
        norm = self.head.normaliser
        dev, dt = self.device, self.dtype
        with torch.no_grad():
            ctx = self.head.encode(norm.norm("state", torch.from_numpy(state).to(dev, dt))[None],
                                   norm.norm("cond", torch.from_numpy(cond).to(dev, dt))[None])
            if noise is None:
                noise = torch.randn(1, h, d, generator=generator)  # on the CPU: same noise on every device
                if self.noise_scale != 1.0:
                    noise = noise * self.noise_scale
            guide, prefix_len = self._guide(request)
            fn = self._velocity_fn(ctx)
            x = integrate(fn, noise.to(dev, dt), self.num_steps, guide)
            out = norm.denorm("action", x)[0].double().cpu().numpy()
        if isinstance(guide, PrefixConditioning) and prefix_len and request is not None and request.prefix is not None:
            # exact in robot units too (normalise/denormalise round-off must not move the locked prefix)
            out[:prefix_len] = request.prefix[:prefix_len]
        return ChunkResult(out, prefix_len, (time.perf_counter() - t0) * 1e3)

    def _guide(self, request: RtcRequest | None):
        if request is None or request.prefix is None or self.method is Method.NAIVE:
            return Unguided(), 0
        prefix = self.head.normaliser.norm("action", torch.from_numpy(request.prefix).to(self.device, self.dtype))[None]
        if self.method.uses_prefix_conditioning:
            return PrefixConditioning(prefix, request.prefix_len), request.prefix_len
        w = torch.from_numpy(prefix_weights(request.prefix_len, request.region_end, self.cfg.horizon,
                                            self.schedule)).to(self.device, self.dtype)
        return Guidance(prefix, w, self.beta, vjp=self.method is Method.TEST_TIME_VJP), request.prefix_len
