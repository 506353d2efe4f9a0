"""Parameter tables of the docs, rendered from the config dataclasses' `param()` metadata.

The node parameters are declared once, as `param(...)` fields of frozen config dataclasses
(`plan_stack.config`); a hand-written table beside them drifts. A docs page marks where a class's table
goes, optionally with the prefix the node declares it under:

    <!-- params: plan_stack.ingest.config.SyncConfig -->
    <!-- /params -->
    <!-- params: plan_stack.embodiments.drive.vehicle.VehicleParams prefix=vehicle -->
    <!-- /params -->

and `fill` replaces everything between a marker and its `<!-- /params -->` with the table (parameter, type,
default, range or choices, read-only, description), exactly as `plan_stack.ros.params.declare_config` reads
the fields. `scripts/param_docs.py --write` fills the pages, `--check` and test/test_param_docs.py fail when
a page's table differs from the generated one.

A class is imported by its dotted path only when its table is rendered, so this module imports no ROS; a
class defined in a node module needs the ROS environment to be imported, as the node itself does.
"""
from __future__ import annotations

import dataclasses
import enum
import importlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from plan_stack.config import FieldKind, ParamInfo, field_kinds, info_of

__all__ = ["Block", "ParamDocsError", "blocks", "fill", "load_class", "render_table", "stale_pages"]

#: A table block: the opening marker (group 1: dotted class path, group 2: optional prefix), the body, the end.
BLOCK = re.compile(r"(<!-- params: ([\w.]+)(?: prefix=([\w.]+))? -->\n)(.*?)(<!-- /params -->)", re.DOTALL)
HEADER = ("| parameter | type | default | range / choices | read-only | description |\n"
          "|---|---|---|---|---|---|\n")


class ParamDocsError(ValueError):
    """A marker names a class that cannot be imported or is not a config dataclass."""


class Block(NamedTuple):
    """One table marker of a page: the class's dotted path and the parameter prefix ('' for none)."""

    path: str
    prefix: str


def load_class(path: str) -> type:
    """The config dataclass named by `package.module.Class` (imported now)."""
    module_name, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ParamDocsError(f"{path}: cannot import the config class ({exc})") from exc
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ParamDocsError(f"{path}: not a config dataclass")
    return cls


def _code(text: str) -> str:
    return f"`{text}`"


def _value(value: Any) -> str:
    """A default or bound as the YAML of a robot config writes it."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"' if value == "" or value.strip() != value else value
    return repr(value)


def _type(kind: FieldKind) -> str:
    if kind.enum is not None:
        return "string"
    names = {bool: "bool", int: "int", float: "double", str: "string"}
    scalar = names.get(kind.scalar) if kind.scalar else None
    array = f"{names[kind.item]}[]" if kind.item else None
    return " or ".join(t for t in (scalar, array) if t)


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return _code(_value(f.default))
    if f.default_factory is not dataclasses.MISSING:
        return _code(_value(f.default_factory()))
    return "required"


def _range(info: ParamInfo, kind: FieldKind) -> str:
    if info.choices is not None:
        return ", ".join(_code(_value(c)) for c in info.choices)
    if kind.enum is not None:
        return ", ".join(_code(str(m.value)) for m in kind.enum)
    if info.min is not None and info.max is not None:
        return f"[{_value(info.min)}, {_value(info.max)}]"
    if info.min is not None:
        return f"≥ {_value(info.min)}"
    if info.max is not None:
        return f"≤ {_value(info.max)}"
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_table(cls: type, prefix: str = "") -> str:
    """The Markdown table of every parameter `declare_config(node, cls, prefix)` declares."""
    rows = [HEADER]
    for name, (f, kind) in field_kinds(cls).items():
        info = info_of(f)
        pname = f"{prefix}.{name}" if prefix else name
        cells = (_code(pname), _type(kind), _default(f), _range(info, kind), "yes" if info.read_only else "",
                 info.description)
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |\n")
    return "".join(rows)


def blocks(text: str) -> Iterator[Block]:
    """The table markers of a page, in order."""
    for m in BLOCK.finditer(text):
        yield Block(m.group(2), m.group(3) or "")


def fill(text: str) -> str:
    """`text` with every marked block's body replaced by its generated table."""
    def body(m: re.Match) -> str:
        table = render_table(load_class(m.group(2)), m.group(3) or "")
        return f"{m.group(1)}{table}{m.group(5)}"

    return BLOCK.sub(body, text)


def stale_pages(pages: Iterable[Path], write: bool = False) -> list[Path]:
    """The pages whose tables differ from the generated ones (rewritten in place when `write`)."""
    stale = []
    for page in pages:
        text = page.read_text()
        new = fill(text)
        if new != text:
            stale.append(page)
            if write:
                page.write_text(new)
    return stale
