"""`make demo`: the learned stack drives the simulator for one episode; SUCCESS / FAILURE, bag, pictures.

    python -m plan_stack.eval.episodes.demo --robot aloha --out out/demo [--seed 100000] [--rtf 0.25]

One closed-loop episode of the full graph (`eval.episodes.episode`: simulator, bridge, ingest,
planner, chunker, stitcher, each in its own process; nothing scripted in the loop) on a held-out
seed, recorded whole into `OUT/closed_loop_<robot>_<seed>/` (rosbag2 MCAP). Afterwards:

* `OUT/closed_loop_<robot>_<seed>.png`: contact sheet, rows = moments of the episode, columns = the
  cameras (what the robot saw);
* `OUT/closed_loop_<robot>_<seed>_plans/`: the planner's plans drawn on the camera image they were
  planned from (`plan_stack.viz.render`), a few spread over the episode;
* `OUT/closed_loop_<robot>_<seed>_episode.json`: the episode row (success, counts, latency by stage).

Prints `SUCCESS` or `FAILURE` with the success criterion (`eval.episodes.criterion`); exit status 0 on
success, 1 on failure, 2 when the episode could not run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

__all__ = ["contact_sheet_from_bag", "main"]

#: rows of the contact sheet
SHEET_ROWS = 6
#: plan pictures written
PLAN_PICTURES = 6


def contact_sheet_from_bag(bag: str | Path, png: str | Path, rows: int = SHEET_ROWS) -> int:
    """Camera images of `rows` moments spread over the bag, one column per camera; returns the rows drawn.

    Uses the raw camera topics when the bag holds their images, else the images of `/observation` (what the
    stack saw, at the model's size), e.g. for a bag recorded without the cameras.
    """
    from plan_stack.eval.episodes.expert_demo import contact_sheet
    from plan_stack.viz.bag import bag_connections, camera_of_topic, image_array, read_messages

    conns = bag_connections(bag)
    topics = sorted(t for t in conns if camera_of_topic(t))
    msgs = read_messages(bag, topics) if topics else {}
    streams: dict[str, list] = {}
    for topic in topics:
        name = camera_of_topic(topic)
        if name and msgs.get(topic):
            streams[name] = msgs[topic]
    if not streams and "/observation" in conns:
        obs = read_messages(bag, ["/observation"]).get("/observation", [])
        for t, m in obs:
            for name, img in zip(m.camera_names, m.images):
                streams.setdefault(name, []).append((t, img))
    if not streams:
        return 0
    ref = next(iter(streams.values()))
    picks = np.unique(np.linspace(0, len(ref) - 1, min(rows, len(ref))).round().astype(int))
    frames = []
    for i in picks:
        t = ref[i][0]
        images = {}
        for name, items in streams.items():
            j = int(np.argmin([abs(tt - t) for tt, _ in items]))
            images[name] = image_array(items[j][1])
        if len({im.shape for im in images.values()}) == 1:
            frames.append((t, images))
    if frames:
        contact_sheet(frames, str(png))
    return len(frames)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m plan_stack.eval.episodes.demo", description=__doc__.splitlines()[0])
    from plan_stack.robots import robot_names

    ap.add_argument("--robot", default="aloha", choices=robot_names())
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=100000, help="simulator seed (ALOHA held-out seeds: 100000-100039)")
    ap.add_argument("--rtf", type=float, default=0.25, help="simulator real-time factor (upper bound)")
    ap.add_argument("--no-pace", dest="pace", action="store_false", help="do not pace the simulator to the stack")
    ap.add_argument("--time-limit", type=float, default=None, help="sim seconds (default: the robot's)")
    args = ap.parse_args(argv)

    from plan_stack.eval.episodes.episode import EpisodeOptions, run_episode
    from plan_stack.robot_config import load_robot_config

    if not any(s.executable == "planner" for s in load_robot_config(args.robot).nodes):
        print(f"demo: config/{args.robot}.yaml runs no planner yet (its models are not trained): nothing learned "
              f"to demonstrate", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"closed_loop_{args.robot}_{args.seed}"
    bag = out / stem
    if bag.exists():
        shutil.rmtree(bag)
    row = run_episode(EpisodeOptions(
        robot=args.robot, seed=args.seed, real_time_factor=args.rtf, time_limit_s=args.time_limit,
        pace_chunk_lead_s=0.6 if args.pace else 0.0, pace_plan_lead_s=1.0 if args.pace else 0.0,
        bag=str(bag), log_dir=str(out / f"{stem}_logs")))
    (out / f"{stem}_episode.json").write_text(json.dumps(row, indent=1))
    if row["error"]:
        print(f"demo: the episode could not run: {row['error']}", file=sys.stderr)
        return 2
    sheet = out / f"{stem}.png"
    drawn = contact_sheet_from_bag(bag, sheet)
    plans_dir = out / f"{stem}_plans"
    try:
        from plan_stack.viz.render import render_bag

        every = max(1, int(row.get("plans") or 1) // PLAN_PICTURES)
        rendered = render_bag(bag, plans_dir, every=every, limit=PLAN_PICTURES)
        plan_note = f"{len(rendered.files)} plan pictures in {plans_dir}"
    except Exception as exc:  # pictures are a by-product: say why they are missing
        plan_note = f"plan pictures not drawn: {exc}"
    verdict = "SUCCESS" if row["success"] else "FAILURE"
    print(f"{verdict}: {args.robot} seed {args.seed}, learned stack ({row['decoder']}): {row['reason']}; "
          f"{row['sim_time_s']:.1f} s sim, {row['plans']} plans, {row['chunks']} chunks, {row['trajectories']} "
          f"trajectories, {row['bridge_rejections']} refused by the bridge, {row['limit_violations']} limit "
          f"violations; end to end p50 {row['e2e_latency_p50_ms']} ms")
    if row.get("protective_stop"):
        print(f"the bridge stopped the arms: {row['protective_stop']}")
    print(f"bag: {bag}  contact sheet: {sheet if drawn else '(no camera frames)'}  {plan_note}")
    return 0 if row["success"] else 1


if __name__ == "__main__":
    sys.exit(main())
