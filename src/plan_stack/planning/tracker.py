"""What the committed output is in: text, a tool call, or a primitive (and there, which tokens are legal).

Every decoder commits tokens through one `Tracker`, and drafting and verification walk copies of it, so
drafts, verification and AR steps apply the same grammar masks (the reason DFlash inside primitives is
token-identical to constrained AR).
"""
from __future__ import annotations

import enum
from typing import Any

import torch

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import ToolCallError
from plan_stack.planning.grammar import Grammar, TokenSets
from plan_stack.planning.tool_call import parse_tool_call

__all__ = ["Event", "Tracker"]


class Event(enum.StrEnum):
    """What committing one token did."""

    NONE = ""  # text, a tool call's body, or a primitive position that does not close it
    START = "start"  # a primitive start token with a valid declared block size: fixed layout
    REJECTED = "rejected"  # a start token whose declared block size is invalid, missing or over budget: open mode
    TRUNCATED = "truncated"  # a start token with no room in the budget for even the shortest primitive
    END = "end"  # the last token of a primitive

    @property
    def opens(self) -> bool:
        """A primitive begins (fixed layout or open mode)."""
        return self in (Event.START, Event.REJECTED)


class Tracker:
    """Follows committed tokens: text mode, tool calls, and the grammar inside a primitive."""

    def __init__(self, vocab: V.Vocab, sets: TokenSets, tokenizer: Any, budget: int):
        self.vocab, self.sets, self.tokenizer, self.budget = vocab, sets, tokenizer, budget
        self.count = 0
        self.grammar: Grammar | None = None
        self.start_kind = ""
        self._tool: list[int] | None = None
        self.declared: int | None = None
        self.declare_error = ""
        self._start_ids = vocab.start_ids
        self._id_to_token = {vocab[t]: t for t in V.START_TOKENS}

    def copy(self) -> Tracker:
        t = object.__new__(Tracker)
        t.__dict__.update(self.__dict__)
        t.grammar = self.grammar.copy() if self.grammar is not None else None
        t._tool = list(self._tool) if self._tool is not None else None
        return t

    @property
    def in_primitive(self) -> bool:
        return self.grammar is not None

    @property
    def fixed_layout(self) -> L.Layout | None:
        """The layout of the primitive being emitted when it has a fixed one (None: text or open mode)."""
        return None if self.grammar is None else self.grammar.layout

    def allowed(self) -> torch.Tensor | None:
        return None if self.grammar is None else self.grammar.allowed()

    def advance(self, tok: int, checked: bool = False) -> Event:
        """Consume one committed token; returns the event it caused. `checked`: see `Grammar.advance`."""
        self.count += 1
        v = self.vocab
        if self.grammar is not None:
            self.grammar.advance(tok, checked)
            if self.grammar.done:
                self.grammar = None
                return Event.END
            return Event.NONE
        if tok == v[V.TOOL_CALL_START]:
            self._tool = []
        elif tok == v[V.TOOL_CALL_END] and self._tool is not None:
            body = self.tokenizer.decode(self._tool)
            self._tool = None
            try:
                self.declared, self.declare_error = parse_tool_call(body), ""
            except ToolCallError as exc:
                self.declared, self.declare_error = None, str(exc)
        elif self._tool is not None:
            self._tool.append(tok)
        elif tok in self._start_ids:
            start = self._id_to_token[tok]
            left = self.budget - self.count
            layout = L.layout_for(start, self.declared) if self.declared is not None else None
            event = Event.START
            if layout is not None and layout.block_size - 1 <= left:
                self.grammar = Grammar(self.sets, layout)
            else:
                event = Event.REJECTED
                self.grammar = Grammar(self.sets, kind=L.OPEN_KIND[start], budget_left=left)
                if self.grammar.min_length() > left:
                    self.grammar = None
                    event = Event.TRUNCATED
            self.start_kind = start
            self.declared, self.declare_error = None, ""
            return event
        return Event.NONE
