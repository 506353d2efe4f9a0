"""SpeculationSchedule: speculate where it pays, probe where it does not, keep the paper's schedule at 0."""
from __future__ import annotations

from plan_stack.planning.speculation import SpeculationSchedule


def test_speculation_schedule_speculates_where_it_pays_and_probes_where_it_does_not():
    sch = SpeculationSchedule(probe_every=2)
    assert sch.speculate("text")  # nothing measured: speculate
    sch.record_speculative("text", 1, 3.0)
    assert not sch.speculate("text")  # measured only speculatively: one AR step to compare
    sch.record_ar(1.0)
    assert not sch.pays("text")  # 3 ms per token against 1
    decisions = [sch.speculate("text") for _ in range(14)]
    assert decisions == [False, True, False, False, False, True] + [False] * 7 + [True]  # after 2, 4, 8 AR steps
    sch.record_speculative("robot_2d3d", 12, 4.0)  # another path, measured on its own
    assert sch.pays("robot_2d3d") and sch.speculate("robot_2d3d")
    for _ in range(10):  # the text drafter got good: the average follows and speculation resumes
        sch.record_speculative("text", 10, 3.5)
    assert sch.pays("text") and all(sch.speculate("text") for _ in range(5))
    sch.record_speculative("text", 10, 1000.0)  # one stall counts as 4 x the average: still pays
    assert sch.pays("text")
    always = SpeculationSchedule(probe_every=0)
    always.record_speculative("text", 1, 100.0)
    always.record_ar(1.0)
    assert not always.pays("text") and always.speculate("text")
