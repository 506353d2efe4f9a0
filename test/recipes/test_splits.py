"""The recorded splits of `plan-stack train`: disjoint seed ranges, recorded with the robot's options, read once."""
from __future__ import annotations

import pytest

from plan_stack.robots import PROFILES, profile

#: eval-head's tuning seeds (docs/closed_loop.md): never trained on either
TUNING_SEEDS = set(range(300000, 300030))


@pytest.mark.parametrize("robot", sorted(PROFILES))
def test_splits_are_disjoint_seed_ranges_for_every_trainable_robot(robot):
    splits = profile(robot).splits
    rounds = [split for split, _ in profile(robot).onpolicy_rounds]
    assert set(splits) == {"train", "val", "heldout", *profile(robot).planner_extra_splits, *rounds}
    seeds = {name: set(range(first, first + n)) for name, (first, n) in splits.items()}
    assert all(len(s) > 0 for s in seeds.values())
    names = sorted(seeds)
    for i, a in enumerate(names):
        assert not seeds[a] & TUNING_SEEDS
        for b in names[i + 1:]:
            assert not seeds[a] & seeds[b], (a, b)


def test_extra_planner_splits_record_with_options_record_demos_takes(tmp_path):
    from plan_stack.cli import main

    for robot, p in PROFILES.items():
        for split, options in p.planner_extra_splits.items():
            assert split in p.splits
            # the options parse for that robot (one tiny episode, nothing else)
            short = ["--duration", "1"] if robot == "drive" else []  # the last --duration given wins
            assert main(["record-demos", "--robot", robot, "--episodes", "1", "--width", "32", "--height", "32",
                         "--seed", str(p.splits[split][0]), "--out", str(tmp_path / split), *options,
                         *short]) == 0


def test_every_split_is_recorded_with_the_robots_record_options(tmp_path, monkeypatch):
    import plan_stack.cli
    from plan_stack.recipes.splits import record_splits

    calls = []
    monkeypatch.setattr(plan_stack.cli, "main", lambda argv: calls.append(argv) or 0)
    (tmp_path / "val").mkdir()
    (tmp_path / "val" / "drive_200000.json").write_text("{}")  # a recorded split is kept
    record_splits("drive", str(tmp_path), lambda msg: None)
    # the on-policy rounds' splits are the on-policy stage's: each needs the model the stage before wrote
    rounds = {split for split, _ in profile("drive").onpolicy_rounds}
    assert rounds == {"onpolicy", "onpolicy2", "onpolicy3", "onpolicy4", "onpolicy6"}
    assert [c[c.index("--out") + 1] for c in calls] == [str(tmp_path / s) for s in profile("drive").splits
                                                        if s != "val" and s not in rounds]
    for argv in calls:  # driving keyframes every 0.5 s in every split, train and held-out alike
        assert argv[argv.index("--keyframe-period") + 1] == "0.5"


def test_a_split_is_read_once_per_process_while_its_fingerprint_holds(tmp_path, monkeypatch):
    """The on-policy stage trains every round in one process: a split read by an earlier round is not read
    again, unless its annotation files changed (another fingerprint) or another image size is asked for."""
    import plan_stack.data.episodes
    from plan_stack.recipes import splits as SP

    reads = []

    def counting_load(path, spec, image_size, **kw):
        reads.append((path, image_size))
        return [f"{path}@{image_size}#{len(reads)}"]

    monkeypatch.setattr(plan_stack.data.episodes, "load_keyframes", counting_load)
    monkeypatch.setattr(SP, "_LOADED_SPLITS", {})
    split, spec = str(tmp_path / "train"), profile("drive").learning
    first = SP.split_keyframes(split, spec, (80, 80), {"sha256": "a"})
    again = SP.split_keyframes(split, spec, (80, 80), {"sha256": "a"})
    assert again == first and len(reads) == 1
    again.append("a caller's own list")  # callers add to their lists: the cached one stays as read
    assert SP.split_keyframes(split, spec, (80, 80), {"sha256": "a"}) == first
    assert SP.split_keyframes(split, spec, (80, 80), {"sha256": "b"}) != first  # re-recorded: read again
    SP.split_keyframes(split, spec, (112, 112), {"sha256": "a"})
    assert len(reads) == 3
