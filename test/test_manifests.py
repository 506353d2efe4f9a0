"""The shared JSON-manifest reader: the caller's error type, with the file and the problem named."""
from __future__ import annotations

import json

import pytest

from plan_stack.manifests import read_json_manifest


class MyError(ValueError):
    pass


def test_reads_the_object(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"a": 1}))
    assert read_json_manifest(tmp_path, "m.json", MyError, "make it") == {"a": 1}


@pytest.mark.parametrize("content, match", [
    (None, r"no m\.json \(make it\)"),
    ("{", "m.json: invalid JSON"),
    ("[1]", "m.json: must hold a JSON object, not list"),
    (b"\xff\xfe", "invalid JSON"),
])
def test_bad_files_raise_the_callers_error(tmp_path, content, match):
    if isinstance(content, bytes):
        (tmp_path / "m.json").write_bytes(content)
    elif content is not None:
        (tmp_path / "m.json").write_text(content)
    with pytest.raises(MyError, match=match):
        read_json_manifest(tmp_path, "m.json", MyError, "make it")
