"""Fill or check the parameter tables of docs/ from the config dataclasses (plan_stack.param_docs).

    python scripts/param_docs.py --check    # exit 1 and name the pages whose tables are not the generated ones
    python scripts/param_docs.py --write    # rewrite those tables

Run it in the environment the nodes run in (`source scripts/env.bash`): a config class defined in a node
module is imported with that module.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plan_stack.param_docs import ParamDocsError, stale_pages

DOCS = Path(__file__).resolve().parents[1] / "docs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report stale tables, change nothing (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite the stale tables")
    args = parser.parse_args(argv)
    try:
        stale = stale_pages(sorted(DOCS.rglob("*.md")), write=args.write)
    except ParamDocsError as exc:
        print(f"param_docs: {exc}", file=sys.stderr)
        return 2
    for page in stale:
        print(f"{'rewrote' if args.write else 'stale'}: {page.relative_to(DOCS.parent)}")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
