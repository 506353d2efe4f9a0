"""The docs' parameter tables are the generated ones, every node's config has one, and every link resolves."""
from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import re
import sys
import types
from pathlib import Path

import pytest

from plan_stack.config import param, validate
from plan_stack.param_docs import Block, ParamDocsError, blocks, fill, load_class, render_table, stale_pages

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
SRC = ROOT / "src"


class Mode(enum.StrEnum):
    FAST = "fast"
    SAFE = "safe"


@dataclasses.dataclass(frozen=True)
class Toy:
    joint_names: tuple[str, ...] = param("joints, in order", read_only=True)
    dt: float = param("period (s)", 0.02, min=1e-4, max=1.0)
    steps: int = param("steps | per chunk", 50, min=1)
    gain: float | tuple[float, ...] = param("one value, or one per joint", 1.0, max=5.0)
    backend: str = param("solver", "mpc", choices=("mpc", "ruckig"))
    mode: Mode = param("how to run", Mode.SAFE)
    enabled: bool = param("on or off", True)
    label: str = param("free text", "")

    def __post_init__(self) -> None:
        validate(self)


@pytest.fixture
def toy_module(monkeypatch):
    """`Toy` importable as `param_docs_toy.Toy`, as a marker names a class."""
    module = types.ModuleType("param_docs_toy")
    module.Toy = Toy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "param_docs_toy", module)
    return module


def test_a_table_row_says_type_default_range_read_only_and_description_of_each_field():
    rows = render_table(Toy).splitlines()
    assert rows[0] == "| parameter | type | default | range / choices | read-only | description |"
    assert rows[2:] == [
        "| `joint_names` | string[] | required |  | yes | joints, in order |",
        "| `dt` | double | `0.02` | [0.0001, 1.0] |  | period (s) |",
        "| `steps` | int | `50` | ≥ 1 |  | steps \\| per chunk |",
        "| `gain` | double or double[] | `1.0` | ≤ 5.0 |  | one value, or one per joint |",
        "| `backend` | string | `mpc` | `mpc`, `ruckig` |  | solver |",
        "| `mode` | string | `safe` | `fast`, `safe` |  | how to run |",
        "| `enabled` | bool | `true` |  |  | on or off |",
        '| `label` | string | `""` |  |  | free text |',
    ]


def test_a_prefix_names_the_parameters_as_the_node_declares_them():
    assert "| `limits.dt` | double |" in render_table(Toy, "limits")


def test_fill_replaces_only_the_marked_block_and_keeps_the_text_around_it(toy_module):
    page = ("# Page\n\nbefore\n<!-- params: param_docs_toy.Toy prefix=p -->\nstale table\n<!-- /params -->\n"
            "after\n")
    filled = fill(page)
    assert filled.startswith("# Page\n\nbefore\n<!-- params: param_docs_toy.Toy prefix=p -->\n| parameter |")
    assert filled.endswith("|\n<!-- /params -->\nafter\n") and "stale table" not in filled
    assert fill(filled) == filled
    assert list(blocks(page)) == [Block("param_docs_toy.Toy", "p")]


def test_stale_pages_names_a_page_whose_table_differs_and_rewrites_it_only_when_asked(tmp_path, toy_module):
    page = tmp_path / "page.md"
    page.write_text("<!-- params: param_docs_toy.Toy -->\n<!-- /params -->\n")
    assert stale_pages([page]) == [page] and "| `dt` |" not in page.read_text()
    assert stale_pages([page], write=True) == [page] and stale_pages([page]) == []


@pytest.mark.parametrize("path, match", [
    ("plan_stack.no_such_module.Config", "cannot import"),
    ("plan_stack.config.NoSuchConfig", "cannot import"),
    ("plan_stack.config.param", "not a config dataclass"),
])
def test_a_marker_naming_no_config_class_is_an_error(path, match):
    with pytest.raises(ParamDocsError, match=f"^{re.escape(path)}: {match}"):
        load_class(path)


def test_every_parameter_table_in_docs_is_the_generated_one():
    stale = [str(p.relative_to(ROOT)) for p in stale_pages(PAGES)]
    assert not stale, f"tables differ from param(): {stale}; run `python scripts/param_docs.py --write`"


def _node_configs() -> set[tuple[type, str]]:
    """(config class, parameter prefix) of every declare_config / declare_sim_config call of a node module,
    and of the config class an arm bridge node hands its base (`super().__init__(name, Config)`)."""
    found: set[tuple[type, str]] = set()
    for path in sorted((SRC / "plan_stack").rglob("*_node.py")):
        module = importlib.import_module(".".join(path.relative_to(SRC).with_suffix("").parts))
        for call in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            index = {"declare_config": 1, "declare_sim_config": 0, "__init__": 1}.get(name)
            if index is None or len(call.args) <= index or not isinstance(call.args[index], ast.Name):
                continue
            cls = getattr(module, call.args[index].id, None)  # a function's argument is no module attribute
            if isinstance(cls, type) and dataclasses.is_dataclass(cls):
                prefix = next((k.value.value for k in call.keywords
                               if k.arg == "prefix" and isinstance(k.value, ast.Constant)), "")
                found.add((cls, prefix))
    return found


def test_every_config_class_a_node_declares_has_a_table_in_docs():
    node_configs = _node_configs()
    assert len(node_configs) >= 15  # the discovery itself still finds the nodes' configs
    documented = {(load_class(b.path), b.prefix) for page in PAGES for b in blocks(page.read_text())}
    missing = sorted(f"{cls.__module__}.{cls.__qualname__}" + (f" prefix={prefix}" if prefix else "")
                     for cls, prefix in node_configs - documented)
    assert not missing, f"node configs without a `<!-- params: ... -->` table in docs/: {missing}"


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page (lower case, punctuation dropped, spaces to hyphens, repeats -N)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def test_every_relative_link_in_the_readme_and_docs_names_a_file_and_heading_that_exist():
    broken = []
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *PAGES]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links that resolve to nothing: {broken}"
