"""Move a held-out evaluation to a machine without the bag reader (a lent GPU machine).

`write`: the keyframes `plan-stack eval-plans` would load from DEMOS (bags + annotations, at the model's
image size) into one compressed file, a few MB instead of the bags' tens. `eval`: `plan-stack eval-plans`
on those keyframes, every other argument passed on (`--robot`, `--decoders`, `--device`, `--json`, ...);
`--demos` is the pack. The rows are the ones eval-plans writes from the bags: same keyframes, same scoring.

    python scripts/keyframe_pack.py write --robot aloha --demos out/aloha_heldout --episodes 20 --out PACK
    python scripts/keyframe_pack.py eval PACK --robot aloha --decoders ar,vflash --device cuda --json J
"""
from __future__ import annotations

import argparse
import lzma
import pickle
import sys


def write(args: argparse.Namespace) -> int:
    from plan_stack.data.episodes import data_fingerprint, load_keyframes
    from plan_stack.paths import find_data
    from plan_stack.planning.model_dir import load_planner_model
    from plan_stack.robots import profile

    model = load_planner_model(args.model or str(find_data("models", args.robot)))
    keyframes = load_keyframes(args.demos, profile(args.robot).learning, model.required_image_size(),
                               limit=args.episodes, progress=True)
    pack = {"robot": args.robot, "demos": args.demos, "fingerprint": data_fingerprint([args.demos]),
            "image_size": model.required_image_size(), "keyframes": keyframes}
    with lzma.open(args.out, "wb", preset=6) as fh:
        pickle.dump(pack, fh)
    print(f"{len(keyframes)} keyframes of {len({kf.seed for kf in keyframes})} episodes -> {args.out}")
    return 0


def evaluate(pack_path: str, rest: list[str]) -> int:
    from plan_stack.cli import main
    from plan_stack.data import episodes

    with lzma.open(pack_path, "rb") as fh:
        pack = pickle.load(fh)  # noqa: S301 - a file this script wrote

    def load_keyframes(path, spec, image_size, limit=None, **_):
        if tuple(image_size) != tuple(pack["image_size"]):
            raise ValueError(f"{pack_path}: keyframes at {pack['image_size']}, the model needs {image_size}")
        seeds = set(sorted({kf.seed for kf in pack["keyframes"]})[:limit])
        return [kf for kf in pack["keyframes"] if kf.seed in seeds]

    episodes.load_keyframes = load_keyframes  # eval-plans imports it when it runs
    episodes.data_fingerprint = lambda dirs: pack["fingerprint"]
    return main(["eval-plans", "--demos", pack_path, *rest])


def run() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "eval":
        return evaluate(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--robot", required=True)
    w.add_argument("--demos", required=True)
    w.add_argument("--model", default=None)
    w.add_argument("--episodes", type=int, default=None)
    w.add_argument("--out", required=True)
    sub.add_parser("eval", help="PACK, then eval-plans arguments")
    return write(ap.parse_args())


if __name__ == "__main__":
    sys.exit(run())
