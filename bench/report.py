"""Output shared by every benchmark: a table on stdout, the same rows as JSON.

Each script under bench/ builds a list of rows (dicts keyed by column name)
and calls `report(rows, columns, json_path)`; with `--json PATH` (added by
`add_json_option`) the rows are written unchanged as a JSON list. Rows may
carry more keys than the printed columns: the JSON keeps them all.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", default="",
                        help="also write the rows as a JSON list of objects keyed by column name")


def format_value(value: Any, spec: str | None = None) -> str:
    if value is None:
        return "-"
    if spec is not None:
        return format(value, spec)
    if isinstance(value, float):
        if value != 0 and math.isfinite(value) and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.2e}"
        return f"{value:.3f}"
    return str(value)


def print_table(rows: Sequence[dict], columns: Sequence[str], formats: dict[str, str] | None = None,
                file=sys.stdout) -> None:
    """Right-aligned columns sized to their widest cell."""
    formats = formats or {}
    cells = [[format_value(r.get(c), formats.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)), file=file)
    for row in cells:
        print("  ".join(x.rjust(w) for x, w in zip(row, widths)), file=file)
    file.flush()


def _json_safe(value: Any) -> Any:
    """NaN/inf (a metric that does not apply) become null: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(rows: Iterable[dict], path: str) -> None:
    with open(path, "w") as fh:
        json.dump([_json_safe(r) for r in rows], fh, indent=1, allow_nan=False)


def report(rows: Sequence[dict], columns: Sequence[str], json_path: str = "",
           formats: dict[str, str] | None = None) -> None:
    """Print the table and, when `json_path` is set, write the rows there."""
    print_table(rows, columns, formats)
    if json_path:
        write_json(rows, json_path)
