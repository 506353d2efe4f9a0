"""Per path, whether a DFlash step speculates or runs as an AR step: measured while decoding (torch-free)."""
from __future__ import annotations

__all__ = ["SpeculationSchedule"]


class SpeculationSchedule:
    """Where DFlash speculation pays, learned while decoding and kept across plans by its `Decoder`.

    A speculative step costs a drafter pass and a block verification; it saves time only where enough of the
    drafter's proposals are accepted that its milliseconds per committed token beat an AR step's. On a CPU a
    16-token verification costs about 1.5 single steps and the drafter pass another, so a path whose
    proposals are almost all rejected (a drafter that never learnt the Franka trajectories: 1.04 tokens per
    step) decodes slower than AR. Per path (text, each primitive kind) this keeps moving averages of the
    committed tokens and the milliseconds of its speculative steps, and one of an AR step's milliseconds;
    a path whose speculative tokens cost more runs AR steps, and speculates again after `probe_every` of
    them (the interval doubling, up to 32 x, while it still does not pay), so that a drafter that becomes
    useful on another scene is noticed. The committed tokens are the target's greedy ones either way.
    """

    def __init__(self, probe_every: int, smoothing: float = 0.3):
        self.probe_every = probe_every  # 0: always speculate
        self.smoothing = smoothing
        self.spec_tokens: dict[str, float] = {}  # path -> moving average of tokens committed per speculative step
        self.spec_ms: dict[str, float] = {}  # path -> moving average of a speculative step's milliseconds
        self.ar_ms: float | None = None  # moving average of an AR step's milliseconds
        self._interval: dict[str, int] = {}
        self._waited: dict[str, int] = {}

    def pays(self, path: str) -> bool:
        """Whether a speculative step of `path` is expected to commit tokens faster than AR steps (True while
        either side is unmeasured)."""
        if path not in self.spec_ms or self.ar_ms is None:
            return True
        return self.spec_ms[path] / max(self.spec_tokens[path], 1e-9) <= self.ar_ms

    def speculate(self, path: str) -> bool:
        """Whether the next step of `path` speculates. A path measured only speculatively gets one AR step
        (the comparison needs both); one that does not pay speculates once per interval."""
        if self.probe_every == 0 or path not in self.spec_ms:
            return True
        if self.ar_ms is None:
            return False
        if self.pays(path):
            self._interval.pop(path, None)
            self._waited[path] = 0
            return True
        waited = self._waited.get(path, 0) + 1
        interval = self._interval.setdefault(path, self.probe_every)
        if waited < interval:
            self._waited[path] = waited
            return False
        self._waited[path] = 0
        self._interval[path] = min(2 * interval, 32 * self.probe_every)
        return True

    def record_speculative(self, path: str, tokens: int, ms: float) -> None:
        self.spec_tokens[path] = self._average(self.spec_tokens.get(path), float(tokens))
        self.spec_ms[path] = self._average(self.spec_ms.get(path), ms, clip=True)

    def record_ar(self, ms: float) -> None:
        self.ar_ms = self._average(self.ar_ms, ms, clip=True)

    def _average(self, old: float | None, new: float, clip: bool = False) -> float:
        """Moving average; `clip`: a time counts at most 4 x the average, so one stall of the machine (a
        collection, another process) does not switch a path for the next plans, while a lasting change still
        moves it within a few steps."""
        if old is None:
            return new
        if clip:
            new = min(new, 4.0 * old)
        return old + self.smoothing * (new - old)
