"""Real-Time Chunking (RTC) for flow-matching action chunks .

Three layers, so the algorithm works with any velocity model:

1. **Guides** (`guides`: `Unguided`, `PrefixConditioning`, `Guidance`) wrap any velocity
   function `v = fn(x [B, H, D], t [B, H])`; they only change what one
   integration step sees (per-position flow time, guided velocity) and what
   is imposed after it (the locked prefix).
2. **One Euler loop** (`sampling.integrate`) shared by every method.
3. **The runtime** (`runtime`: `align_previous`, `DelayEstimator`, `RtcRuntime`): where
   the previous chunk is on the execution timeline, how many control steps
   the next inference will take, and the constraint d <= s <= H - d.

Flow time follows pi0: `x_t = (1 - t) a + t eps`, target velocity
`u = eps - a`, sampling runs from t = 1 (noise) to t = 0 (clean) in N Euler
steps `x <- x - (1/N) v`. The clean-time value is therefore **0**; the
implied clean estimate is `a_hat = x_t - t v`. Black et al. (2025) write
their guidance in data time tau = 1 - t (tau = 1 clean); we convert at the
one place it matters (`guidance_weight`).

Training-time RTC (simulated delays, masked loss) is in `training`.

Methods (`runtime.Method`): `naive` (no RTC), `hard_prefix` (prefix conditioning on a
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
