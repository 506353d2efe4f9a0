"""The recorded splits `plan-stack train` reads: how each is recorded, recording the missing ones, reading them.

A split is a directory of `record-demos` episodes under `--data` whose episode seeds the robot's profile
fixes (`RobotProfile.splits`), so recording it again gives the same files. The command line that records
a split is written into the manifest (`recorded_with`, `onpolicy_rounds`), so it is built in one place here;
the on-policy stage (`recipes.onpolicy`) records its rounds' splits with it too.
"""
from __future__ import annotations

import os
from typing import Any

from plan_stack.planning.training.data_parallel import usable_cores
from plan_stack.robots import profile


def record_argv(robot: str) -> list[str]:
    """The `plan-stack` arguments every split of `robot` is recorded with (the split adds its seeds, count,
    output and `planner_extra_splits` options); the manifest's `recorded_with` is the same line."""
    return ["record-demos", "--robot", robot, "--width", "224", "--height", "224", "--camera-rate", "2",
            *profile(robot).record_options]


def split_argv(robot: str, data: str, split: str, *options: str) -> list[str]:
    """The `plan-stack` arguments that record `robot`'s `split` (its seeds in the profile's `splits`) into
    DATA/split, with the split's own record-demos `options`."""
    seed, episodes = profile(robot).splits[split]
    return [*record_argv(robot), "--episodes", str(episodes), "--seed", str(seed),
            "--out", os.path.join(data, split), *options]


def record_jobs() -> list[str]:
    """record-demos options for recording a split here: one worker process per core, one torch thread each
    (the files do not depend on them, so the manifest's `recorded_with` leaves them out)."""
    return ["--jobs", str(usable_cores()), "--threads", "1"]


def record_splits(robot: str, data: str, log) -> None:
    """Record every split of the robot's `splits` that `data` lacks (episode seeds fixed, so reproducible); the
    on-policy rounds' splits need a model to drive and are recorded by that stage."""
    from plan_stack.cli import main as cli_main

    robot_profile = profile(robot)
    for split, (seed, episodes) in robot_profile.splits.items():
        if split in {name for name, _ in robot_profile.onpolicy_rounds}:
            continue
        dest = os.path.join(data, split)
        if os.path.isdir(dest) and os.listdir(dest):
            continue
        log(f"recording {robot} {split}: seeds {seed}..{seed + episodes - 1}")
        code = cli_main([*split_argv(robot, data, split, *robot_profile.planner_extra_splits.get(split, ())),
                         *record_jobs()])
        if code:
            raise RuntimeError(f"record-demos failed for {robot} {split} (exit {code})")


#: splits this process has read, by (directory, robot, image size, data fingerprint): the on-policy stage
#: trains every round and the final drafter fine-tune in this process, on the splits read before plus one
_LOADED_SPLITS: dict[tuple[Any, ...], list[Any]] = {}


def split_keyframes(path: str, spec: Any, image_size: tuple[int, int], fingerprint: dict) -> list[Any]:
    """`load_keyframes` of a split, read once per process: a later stage or round in the same process gets
    the same keyframes while the split's fingerprint (every annotation file's bytes) is unchanged.

    Why: each on-policy round re-read every split (≈ 30 s of a driving round's ≈ 4.5 min fine-tune)."""
    from plan_stack.data.episodes import load_keyframes

    key = (os.path.realpath(path), spec.robot, tuple(image_size), fingerprint["sha256"])
    if key not in _LOADED_SPLITS:
        _LOADED_SPLITS[key] = load_keyframes(path, spec, image_size, progress=True)
    return list(_LOADED_SPLITS[key])
