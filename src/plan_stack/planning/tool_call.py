"""The tool call a target writes before each primitive: it declares the block size B."""
from __future__ import annotations

import json

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import ToolCallError

TOOL_NAME = "atomic_decoding"


def tool_call_text(block_size: int) -> str:
    """The exact tool call a target writes before a primitive ."""
    body = json.dumps({"name": TOOL_NAME, "arguments": {"block_size": int(block_size)}}, separators=(",", ":"))
    return f"{V.TOOL_CALL_START}{body}{V.TOOL_CALL_END}"


def parse_tool_call(body: str) -> int:
    """Block size declared by a tool-call body (the JSON between the markers).

    Raises ToolCallError for malformed JSON, another tool name or a block size
    that is not a positive integer.
    """
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"tool call is not JSON: {body!r}") from exc
    if not isinstance(obj, dict) or obj.get("name") != TOOL_NAME:
        raise ToolCallError(f"tool call name must be {TOOL_NAME!r}: {body!r}")
    args = obj.get("arguments")
    size = args.get("block_size") if isinstance(args, dict) else None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ToolCallError(f"block_size must be a positive integer: {body!r}")
    return size
