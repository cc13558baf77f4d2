"""Model slips the raw parser must not turn into runs (issue 40 N08, issue 41 items 3 and 5): calls in a
second tools section never run, text between two calls drops the text and keeps both calls, an
argument given twice fails its call (dynamo #13654); and near-miss markers are never structure in
raw output (only chat mode's reading of leaked text tolerates them). Every row at every chunking:
split in two at every position, and one character at a time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from kimik3.formats.k3 import ParsedOutput, StreamParser, ToolCallDone, ToolCallIncomplete, parse


def call(name: str, index: int, *args: tuple[str, str, str]) -> str:
    values = "".join(f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>' for k, t, v in args)
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{values}<|close|>call<|sep|>'


def tools(*calls: str) -> str:
    return "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>"


LS = call("bash", 1, ("command", "string", "ls"))
RM = call("bash", 1, ("command", "string", "rm -rf build"))
PWD = call("bash", 2, ("command", "string", "pwd"))
HEAD = "checking<|close|>think<|sep|>"
END = "<|close|>message<|sep|>"
TWICE = "it gives argument {!r} more than once, so which value is meant cannot be told; give each argument once"


@dataclass
class Slip:
    name: str
    text: str
    calls: list[tuple[str, dict[str, Any], str | None]]  # name, arguments, error
    content: str = ""
    misplaced: list[str] = field(default_factory=list)
    thinking: bool = True


SLIPS = [
    # -- issue 40, N08: a second tools section (opened after the first closed) ----------------------
    Slip("N08: the second section's call never runs; its text stays, named", HEAD + tools(LS) + tools(RM) + END,
         [("bash", {"command": "ls"}, None)], content=RM, misplaced=["bash"]),
    Slip("variant: a response between the two sections", HEAD + tools(LS) + "<|open|>response<|sep|>done"
         "<|close|>response<|sep|>" + tools(RM) + END, [("bash", {"command": "ls"}, None)], content="done" + RM,
         misplaced=["bash"]),
    Slip("variant: the first section left open by the response", HEAD + "<|open|>tools<|sep|>" + LS +
         "<|open|>response<|sep|>ok<|close|>response<|sep|>" + tools(RM) + END, [("bash", {"command": "ls"}, None)],
         content="ok" + RM, misplaced=["bash"]),
    Slip("variant: an open tag repeated inside the one section changes nothing",
         HEAD + "<|open|>tools<|sep|>" + LS + "<|open|>tools<|sep|>" + PWD + "<|close|>tools<|sep|>" + END,
         [("bash", {"command": "ls"}, None), ("bash", {"command": "pwd"}, None)]),
    Slip("attack: a third section loses nothing of the first", HEAD + tools(LS) + tools(RM) + tools(PWD) + END,
         [("bash", {"command": "ls"}, None)], content=RM + PWD, misplaced=["bash", "bash"]),
    Slip("attack: text after the second section", HEAD + tools(LS) + tools(RM) + "done" + END,
         [("bash", {"command": "ls"}, None)], content=RM + "done", misplaced=["bash"]),
    # (a40c's variants: an empty first section, a second one never closed, blank between, no thinking)
    Slip("a40c: an empty first section is the first: the second's call never runs", HEAD + tools() + tools(RM) + END,
         [], content=RM, misplaced=["bash"]),
    Slip("a40c: a second section never closed", HEAD + tools(LS) + "<|open|>tools<|sep|>" + RM + END,
         [("bash", {"command": "ls"}, None)], content=RM, misplaced=["bash"]),
    Slip("a40c: blank lines between the two sections", HEAD + tools(LS) + " \n " + tools(RM) + END,
         [("bash", {"command": "ls"}, None)], content=RM, misplaced=["bash"]),
    Slip("a40c: thinking off, two sections", tools(LS) + tools(RM) + END, [("bash", {"command": "ls"}, None)],
         content=RM, misplaced=["bash"], thinking=False),
    Slip("a40c: thinking off, an empty first section", tools() + tools(RM) + END, [], content=RM,
         misplaced=["bash"], thinking=False),
    # -- a tools section inside the think channel (a think close follows it) never runs -------------
    Slip("attack: a section in the think channel, then the real one after the think close",
         "plan" + tools(RM) + "<|close|>think<|sep|>" + tools(LS) + END, [("bash", {"command": "ls"}, None)],
         misplaced=["bash"]),
    Slip("variant: two calls in the think channel's section, text before the think close",
         "plan" + tools(RM, PWD) + "then<|close|>think<|sep|>" + tools(LS) + END,
         [("bash", {"command": "ls"}, None)], content="then", misplaced=["bash", "bash"]),
    Slip("variant: no think close after it: the think close omitted (its calls run)", "plan" + tools(LS) + END,
         [("bash", {"command": "ls"}, None)]),
    # -- issue 41, B07: non-blank text between two calls --------------------------------------------
    Slip("B07: text between two calls is dropped, both calls run", HEAD + tools(LS, "Now the second one:", PWD) + END,
         [("bash", {"command": "ls"}, None), ("bash", {"command": "pwd"}, None)]),
    Slip("variant: text between two calls holding a < and a near-miss marker", HEAD + tools(
         LS, "if a < b then <|sep| next\n", PWD) + END,
         [("bash", {"command": "ls"}, None), ("bash", {"command": "pwd"}, None)]),
    Slip("variant: a tools open tag written again between two calls", HEAD + tools(LS, "now<|open|>tools<|sep|>", PWD)
         + END, [("bash", {"command": "ls"}, None), ("bash", {"command": "pwd"}, None)]),
    Slip("variant: text after the last call, before the tools close", HEAD + tools(LS, "that is all") + END,
         [("bash", {"command": "ls"}, None)]),
    Slip("variant: text after the last call, then the message close (tools close omitted)",
         HEAD + "<|open|>tools<|sep|>" + LS + " and then " + END, [("bash", {"command": "ls"}, None)]),
    Slip("variant: text after a value's closer inside a call still shows the closer was text (the call fails)",
         HEAD + tools('<|open|>call tool="bash" index="1"<|sep|><|open|>argument key="command" type="string"<|sep|>'
                      "echo <|close|>argument<|sep|>more<|close|>argument<|sep|><|close|>call<|sep|>", PWD) + END,
         [("bash", {"command": "echo <|close|>argument<|sep|>more"}, "argument 'command' holds the text "
           "<|close|>argument<|sep|>, which is what ends a value, so where the value ends cannot be told. Write that "
           "text another way (for example split or escaped) and call again"), ("bash", {"command": "pwd"}, None)]),
    # -- dynamo #13654: an argument given twice -------------------------------------------------------
    Slip("dynamo #13654: a string argument twice: the call fails, the model reads why",
         HEAD + tools(call("bash", 1, ("command", "string", "ls"), ("command", "string", "rm -rf /"))) + END,
         [("bash", {"command": "rm -rf /"}, TWICE.format("command"))]),
    Slip("variant: the same key as string then number",
         HEAD + tools(call("read", 1, ("path", "string", "a.py"), ("n", "number", "3"), ("n", "number", "4"))) + END,
         [("read", {"path": "a.py", "n": 4}, TWICE.format("n"))]),
    Slip("variant: a json block giving a key an argument already gave",
         HEAD + tools('<|open|>call tool="read" index="1"<|sep|><|open|>argument key="path" type="string"<|sep|>a'
                      '<|close|>argument<|sep|><|open|>json type="object"<|sep|>{"path": "b"}<|close|>json<|sep|>'
                      "<|close|>call<|sep|>") + END,
         [("read", {"path": "b"}, TWICE.format("path"))]),
    Slip("variant: the other calls of the turn still run",
         HEAD + tools(call("bash", 1, ("command", "string", "a"), ("command", "string", "b")), PWD) + END,
         [("bash", {"command": "b"}, TWICE.format("command")), ("bash", {"command": "pwd"}, None)]),
    Slip("attack: a json block giving one key twice inside it (one hook with chat mode)",
         HEAD + tools('<|open|>call tool="read" index="1"<|sep|><|open|>json type="object"<|sep|>'
                      '{"path": "a", "\\u0070ath": "b"}<|close|>json<|sep|><|close|>call<|sep|>') + END,
         [("read", {}, "its json arguments block: " + TWICE.format("path"))]),
    Slip("variant: a json-typed argument with a key twice nested in it",
         HEAD + tools(call("read", 1, ("opts", "object", '{"x": {"y": 1, "y": 2}}'))) + END,
         [("read", {"opts": '{"x": {"y": 1, "y": 2}}'}, "argument 'opts': " + TWICE.format("y"))]),
    # -- near-miss markers are text in raw output ----------------------------------------------------
    # (the header "response<|sep|the answer is 4" never gets its sep: an unfinished tag, dropped)
    Slip("raw output: a near-miss sep is no sep (markers are single tokens there)",
         "r<|close|>think<|sep|><|open|>response<|sep|the answer is 4" + END, []),
    Slip("raw output: a bare think close at the end is no tag either", "r<|close|>think<|sep|>done<|close|>think\n",
         [], content="done"),
]  # fmt: skip


def key(out: ParsedOutput) -> tuple[Any, ...]:
    return ([(c.name, c.arguments, c.error) for c in out.tool_calls], out.content, list(out.misplaced_tool_calls))


@pytest.mark.parametrize("row", SLIPS, ids=[s.name for s in SLIPS])
def test_model_slip(row: Slip) -> None:
    out = parse(row.text, thinking=row.thinking)
    assert key(out) == (row.calls, row.content, row.misplaced)
    # streamed: split in two anywhere, and a character at a time, the same result and events
    for pieces in [*([row.text[:i], row.text[i:]] for i in range(1, len(row.text))), list(row.text)]:
        parser = StreamParser(row.thinking, id_factory=map("c{}".format, itertools.count()).__next__)
        events = [e for p in pieces for e in parser.feed(p)] + parser.finish()
        assert key(parser.result()) == key(out)
        taken = {e.id for e in events if isinstance(e, ToolCallIncomplete)}  # taken back (misplaced)
        done = [(e.name, e.arguments, e.error) for e in events if isinstance(e, ToolCallDone) and e.id not in taken]
        assert done == row.calls
