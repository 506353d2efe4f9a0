"""Publish a synthetic camera rig over DDS, on the wall clock, from its own process.

    python -m plan_stack.ingest.synthetic_publisher --cameras cam_high,cam_left_wrist \\
        --width 640 --height 480 --rate 30 --jitter 0.005 --drop 0.02 --joint-rate 200 --duration 10

Each frame is published when its stamp comes due (stamps from
`plan_stack.ingest.synthetic.schedule`), so arrival order follows capture
time plus transport, as from real drivers. Images are built once per camera
(only the stamp changes); `--bad CAM:TICK` publishes that frame with a data
length that does not match step*height. Writes what it published to
`--stats` (JSON) when given. For tests, benchmarks and trying an ingest
configuration without a robot; not part of the running stack.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
import rclpy
from sensor_msgs.msg import Image, JointState

from plan_stack.ingest.synthetic import joint_positions, schedule
from plan_stack.ros.image import numpy_to_image
from plan_stack.ros.lifecycle import ros_session
from plan_stack.ros.qos import QOS_BY_NAME, qos_by_name
from plan_stack.ros.time import s_to_stamp

_time = s_to_stamp


def _image(width: int, height: int, encoding: str, seed: int) -> Image:
    rng = np.random.default_rng(seed)
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}[encoding]
    shape = (height, width) if channels == 1 else (height, width, channels)
    return numpy_to_image(rng.integers(0, 256, size=shape, dtype=np.uint8), encoding)


def _corrupt(img: Image) -> Image:
    bad = Image(height=img.height, width=img.width, encoding=img.encoding, step=img.step)
    bad.data = bytes(img.data)[: -img.step // 2]  # data length != step * height
    return bad


def _camera_tick(text: str) -> tuple[int, int]:
    """`CAM_INDEX:TICK` of `--bad`."""
    cam, _, tick = text.partition(":")
    return int(cam), int(tick)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cameras", default="cam_high,cam_left_wrist,cam_right_wrist")
    p.add_argument("--encodings", default="rgb8", help="one encoding, or one per camera (comma separated)")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--rate", type=float, default=30.0, help="camera rate, Hz (integral)")
    p.add_argument("--jitter", type=float, default=0.005, help="uniform stamp jitter, +- s")
    p.add_argument("--drop", type=float, default=0.0, help="fraction of frames not published")
    p.add_argument("--joint-rate", type=float, default=200.0)
    p.add_argument("--joints", default="", help="joint names (comma separated); default j0..j13")
    p.add_argument("--duration", type=float, default=5.0, help="s of stamps to publish")
    p.add_argument("--t0", type=float, default=0.0, help="wall-clock start (whole second); 0: next second + 1")
    p.add_argument("--bad", action="append", default=[], help="CAM_INDEX:TICK to publish malformed")
    p.add_argument("--qos", default="sensor", choices=sorted(QOS_BY_NAME), help="camera QoS")
    p.add_argument("--joint-qos", default="sensor", choices=sorted(QOS_BY_NAME),
                   help="joint_states QoS (ros2_control's joint_state_broadcaster publishes reliable)")
    p.add_argument("--wait-subscribers", type=float, default=5.0, help="s to wait for subscribers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stats", default="", help="write published counts here (JSON)")


def run(args: argparse.Namespace) -> int:
    cams = [c for c in args.cameras.split(",") if c]
    encs = args.encodings.split(",")
    encs = encs * len(cams) if len(encs) == 1 else encs
    joints = [j for j in args.joints.split(",") if j] or [f"j{i}" for i in range(14)]
    bad = [_camera_tick(b) for b in args.bad]
    qos = qos_by_name(args.qos)
    frames = [0] * len(cams)
    counts = {"bad": 0, "joints": 0}
    late_ms_max, t0 = 0.0, 0.0
    with ros_session():
        node = rclpy.create_node("synthetic_rig")
        pubs = [node.create_publisher(Image, f"cameras/{c}/image_raw", qos) for c in cams]
        jpub = node.create_publisher(JointState, "joint_states", qos_by_name(args.joint_qos))
        images = [_image(args.width, args.height, e, args.seed + i) for i, e in enumerate(encs)]
        deadline = time.monotonic() + args.wait_subscribers
        while time.monotonic() < deadline and any(p.get_subscription_count() == 0 for p in pubs + [jpub]):
            time.sleep(0.02)
        t0 = args.t0 or float(math.ceil(time.time()) + 1)
        events = schedule(len(cams), args.rate, args.duration, t0, jitter_s=args.jitter, drop=args.drop,
                          joint_rate_hz=args.joint_rate, bad=bad, seed=args.seed)
        js = JointState(name=joints)
        for ev in events:
            delay = ev.stamp_s - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                late_ms_max = max(late_ms_max, -delay * 1e3)
            stamp = _time(ev.stamp_s)
            if ev.kind == "joints":
                js.header.stamp = stamp
                js.position = joint_positions(ev.stamp_s, len(joints)).tolist()
                jpub.publish(js)
                counts["joints"] += 1
                continue
            img = _corrupt(images[ev.camera]) if ev.bad else images[ev.camera]
            img.header.stamp = stamp
            img.header.frame_id = cams[ev.camera]
            pubs[ev.camera].publish(img)
            frames[ev.camera] += 1
            counts["bad"] += int(ev.bad)
        time.sleep(0.2)  # let the last messages leave before the participant goes
        node.destroy_node()
    published = {"frames": frames, **counts, "late_ms_max": late_ms_max, "t0": t0}
    if args.stats:
        with open(args.stats, "w") as fh:
            json.dump(published, fh)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
