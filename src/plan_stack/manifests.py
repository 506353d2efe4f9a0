"""Reading the JSON manifest of a directory (a model directory, an engines directory) with clear errors.

Each caller keeps its own schema checks; this module only finds the file,
parses it and makes sure it holds a JSON object, raising the caller's error
type with the file named.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["read_json_manifest"]


def read_json_manifest(directory: str | os.PathLike, name: str, error: type[Exception],
                       missing_hint: str) -> dict[str, Any]:
    """The JSON object in `directory/name`.

    Raises `error` when the file is missing (the message ends with
    `missing_hint`, e.g. how to create it), is not valid JSON or does not
    hold a JSON object.
    """
    file = Path(directory) / name
    if not file.is_file():
        raise error(f"{os.fspath(directory)}: no {name} ({missing_hint})")
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{file}: invalid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise error(f"{file}: must hold a JSON object, not {type(doc).__name__}")
    return doc
