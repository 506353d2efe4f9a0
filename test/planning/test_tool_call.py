"""Tool calls: text round trip and malformed calls."""
from __future__ import annotations

import pytest

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import ToolCallError
from plan_stack.planning.tool_call import parse_tool_call, tool_call_text

IMAGE = (640, 480)


def test_tool_call_round_trip_and_errors(tok):
    text = tool_call_text(54)
    assert text == '<tool_call>{"name":"atomic_decoding","arguments":{"block_size":54}}</tool_call>'
    body = text[len(V.TOOL_CALL_START):-len(V.TOOL_CALL_END)]
    assert parse_tool_call(body) == 54
    assert tok.decode(tok.encode(text)) == text
    for bad, match in [("{nope", "not JSON"), ('{"name":"other","arguments":{"block_size":6}}', "name"),
                       ('{"name":"atomic_decoding","arguments":{"block_size":-2}}', "positive"),
                       ('{"name":"atomic_decoding","arguments":{"block_size":true}}', "positive"),
                       ('{"name":"atomic_decoding","arguments":{}}', "positive")]:
        with pytest.raises(ToolCallError, match=match):
            parse_tool_call(bad)
