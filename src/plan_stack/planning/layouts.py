"""Primitive layouts: the fixed slot sequence of every primitive kind once P is known.

Every primitive (box, 3D / 2D+3D robot path, one or two arms, driving path) is
a fixed sequence of *slots* once its waypoint count P is known: the start token
(the block's anchor), delimiters and one coordinate token per axis value. The
tool call (`tool_call`) declares the block size B; the start token picks the
family; together they fix P and therefore the role of every position, which is
what lets the drafter fill a whole primitive in one parallel pass.

Three consumers share these layouts (so they cannot disagree): `grammar`
(legal next token, the schema gate), `selection` (best legal block from drafter
logits) and `fields` (blocks <-> `plan_stack/msg/Primitive` fields).
"""
from __future__ import annotations

import dataclasses
from functools import cache

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError


@dataclasses.dataclass(frozen=True)
class Part:
    """One delimited run of waypoints: start token, P tuples of `axes`, end token."""

    start: str
    end: str
    axes: tuple[str, ...]
    space: str  # "image", "robot", "drive"
    box: bool = False  # a box: one (u1 v1 u2 v2) tuple with ordering, no <oof>

    @property
    def oof(self) -> bool:
        return self.space == "image" and not self.box


_BOX = Part(V.BOX, V.BOX_END, ("u", "v", "u", "v"), "image", box=True)
_R2 = Part(V.ROBOT_2D, V.ROBOT_END, ("u", "v"), "image")
_R3 = Part(V.ROBOT, V.ROBOT_END, ("x", "y", "z"), "robot")
_D2 = Part(V.DRIVE_2D, V.DRIVE_END, ("u", "v"), "image")
_D3 = Part(V.DRIVE, V.DRIVE_END, ("x", "y"), "drive")

#: layout kind -> (parts of one arm, arms, Primitive.kind)
KINDS: dict[str, tuple[tuple[Part, ...], int, str]] = {
    "box": ((_BOX,), 1, "box"),
    "robot_3d": ((_R3,), 1, "robot_3d"),
    "robot_2d3d": ((_R2, _R3), 1, "robot_2d3d"),
    "dual_3d": ((_R3,), 2, "robot_3d"),
    "dual_2d3d": ((_R2, _R3), 2, "robot_2d3d"),
    "drive_3d": ((_D3,), 1, "drive_3d"),
    "drive_2d3d": ((_D2, _D3), 1, "drive_2d3d"),
}
#: start token -> single-arm kind used when no valid block size is declared
OPEN_KIND: dict[str, str] = {V.BOX: "box", V.ROBOT: "robot_3d", V.ROBOT_2D: "robot_2d3d",
                             V.DRIVE: "drive_3d", V.DRIVE_2D: "drive_2d3d"}
MAX_WAYPOINTS = 256


@dataclasses.dataclass(frozen=True)
class Slot:
    """Role of one block position: a fixed token, or one coordinate of a waypoint."""

    token: str | None  # fixed delimiter/start token, None for a coordinate
    axis: str = ""
    space: str = ""
    part: int = 0  # index into Layout.parts (arms unrolled)
    waypoint: int = 0
    oof: bool = False  # `<oof>` legal here (2D trajectory slots)
    box_index: int = -1  # 0..3 for u1 v1 u2 v2


@dataclasses.dataclass(frozen=True)
class Layout:
    """A fully determined primitive block: kind, waypoints P and the slot of every position."""

    kind: str
    waypoints: int
    parts: tuple[Part, ...]  # arms unrolled: left parts then right parts
    slots: tuple[Slot, ...]

    @property
    def block_size(self) -> int:
        return len(self.slots)

    @property
    def start_token(self) -> str:
        return self.parts[0].start

    @property
    def arms(self) -> int:
        return KINDS[self.kind][1]


def block_size_of(kind: str, waypoints: int) -> int:
    parts, arms, _ = KINDS[kind]
    return arms * sum(2 + len(p.axes) * (1 if p.box else waypoints) for p in parts)


@cache
def make_layout(kind: str, waypoints: int = 1) -> Layout:
    """Layout of `kind` with P = `waypoints` (boxes always have one tuple)."""
    if kind not in KINDS:
        raise LayoutError(f"unknown primitive kind {kind!r} (known: {sorted(KINDS)})")
    parts, arms, _ = KINDS[kind]
    if kind == "box":
        waypoints = 1
    if not 1 <= waypoints <= MAX_WAYPOINTS:
        raise LayoutError(f"waypoints {waypoints} outside 1..{MAX_WAYPOINTS}")
    unrolled = parts * arms
    slots: list[Slot] = []
    for pi, part in enumerate(unrolled):
        slots.append(Slot(part.start, part=pi))
        for w in range(1 if part.box else waypoints):
            for ai, axis in enumerate(part.axes):
                slots.append(Slot(None, axis, part.space, pi, w, part.oof, ai if part.box else -1))
        slots.append(Slot(part.end, part=pi))
    return Layout(kind, waypoints, unrolled, tuple(slots))


def layout_for(start_token: str, block_size: int) -> Layout | None:
    """The layout that a start token and a declared block size fix, or None if none matches."""
    for kind, (parts, arms, _) in KINDS.items():
        if parts[0].start != start_token:
            continue
        per_p = arms * sum(len(p.axes) for p in parts)
        fixed = arms * 2 * len(parts)
        if kind == "box":
            if block_size == 6:
                return make_layout("box")
            continue
        rest = block_size - fixed
        if rest > 0 and rest % per_p == 0 and rest // per_p <= MAX_WAYPOINTS:
            return make_layout(kind, rest // per_p)
    return None
