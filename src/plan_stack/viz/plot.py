"""3D pictures of a plan against its ground truth (matplotlib, Agg), without ROS.

Plan primitives are solid lines with dots in their arm colour (start ring,
end dot as in the overlay); the ground truth is a dashed dark line. Points
are plotted in their own frame (robots: camera optical frame, drawn with
image-down (+y) pointing down so the picture reads like the camera's view
from behind; driving: ego frame, x forward). When plan and truth pair up
(same arm, same number of points) the title gives the mean and final
distance (ADE / FDE, cm for robots, m for driving).
"""
from __future__ import annotations

import os

import numpy as np

from plan_stack.viz.config import VizStyle
from plan_stack.viz.plan import PlanView, PrimitiveView

__all__ = ["plot_plan_3d", "pair_errors"]

TRUTH_COLOUR = (0.25, 0.25, 0.25)


def pair_errors(plan: PlanView, truth: PlanView | None) -> dict[str, tuple[float, float]]:
    """arm -> (ADE, FDE) in metres for primitives of plan and truth with the same arm and point count."""
    if truth is None:
        return {}
    out = {}
    gt = {p.arm: p for p in truth.primitives_3d}
    for p in plan.primitives_3d:
        t = gt.get(p.arm)
        if t is not None and len(t.points) == len(p.points):
            d = np.linalg.norm(np.asarray(p.points) - np.asarray(t.points), axis=1)
            out[p.arm or "single"] = (float(d.mean()), float(d[-1]))
    return out


def _draw(ax, prim: PrimitiveView, colour, truth: bool, drive: bool) -> np.ndarray:
    pts = np.asarray(prim.points, dtype=float)
    # robots: plot (x, z, -y): x right, depth into the picture, image-up up; driving: (-y, x, z) seen from behind
    xyz = np.stack([-pts[:, 1], pts[:, 0], pts[:, 2]] if drive else [pts[:, 0], pts[:, 2], -pts[:, 1]], axis=1)
    label = f"{'truth' if truth else 'plan'} {prim.arm or prim.kind}"
    path = prim.kind != "points"  # a set of points, not a path: dots only
    ax.plot(*xyz.T, linestyle=("--" if truth else "-") if path else "none", marker="" if path else "o",
            color=colour, linewidth=1.2 if truth else 2.0, label=label)
    ax.scatter(*xyz.T, color=colour, s=8 if truth else 14, depthshade=False)
    if not truth and path:
        ax.scatter(*xyz[0], s=90, facecolors="none", edgecolors=[colour], linewidths=1.5, depthshade=False)
        ax.scatter(*xyz[-1], s=60, color=colour, depthshade=False)
    return xyz


def plot_plan_3d(plan: PlanView, path: str | os.PathLike, style: VizStyle, truth: PlanView | None = None,
                 title: str = "") -> None:
    """Write a PNG of the plan's 3D primitives (and the ground truth's, dashed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    prims = plan.primitives_3d
    drive = any(p.kind.startswith("drive") for p in prims + (truth.primitives_3d if truth else ()))
    fig = plt.figure(figsize=(5.5, 4.5), dpi=100)
    try:
        ax = fig.add_subplot(projection="3d")
        drawn = [_draw(ax, p, style.colour_of(p.arm), False, drive) for p in prims]
        if truth is not None:
            drawn += [_draw(ax, p, TRUTH_COLOUR, True, drive) for p in truth.primitives_3d]
        if drawn:
            allp = np.concatenate(drawn)
            centre, half = allp.mean(axis=0), max(float(np.ptp(allp, axis=0).max()) / 2, 1e-3) * 1.1
            ax.set_xlim(centre[0] - half, centre[0] + half)
            ax.set_ylim(centre[1] - half, centre[1] + half)
            ax.set_zlim(centre[2] - half, centre[2] + half)
            ax.legend(loc="upper left", fontsize=7)
        frame = prims[0].frame_id if prims else ""
        ax.set_xlabel("-y (left) [m]" if drive else "x (right) [m]", fontsize=8)
        ax.set_ylabel("x (forward) [m]" if drive else "z (depth) [m]", fontsize=8)
        ax.set_zlabel("z [m]" if drive else "-y (up) [m]", fontsize=8)
        ax.tick_params(labelsize=6)
        unit, scale = ("m", 1.0) if drive else ("cm", 100.0)
        errs = pair_errors(plan, truth)
        err_text = "  ".join(f"{arm}: ADE {a * scale:.1f} FDE {f * scale:.1f} {unit}" for arm, (a, f) in errs.items())
        head = title or f"t = {plan.stamp_s:.2f} s  {plan.subtask}"
        ax.set_title("\n".join(x for x in (head, f"frame {frame}" if frame else "", err_text) if x), fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
