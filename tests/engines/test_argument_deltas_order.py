"""Merging a chunk's argument fragments (issue 44) changes nothing a ``run_stream`` consumer can
rely on: at every chunk size, the events are the parser's own with each run of one call's
consecutive fragments joined (order, index and id kept across calls), each call's deltas join to
its final arguments byte for byte, and a chunk that ends one call and starts the next gives their
events in order; the end of a cut stream gives one delta too (attack 4)."""

from __future__ import annotations

from kimik3 import Client, ScriptedEngine
from kimik3.formats.k3 import (
    StreamParser,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallStarted,
    render_output,
)
from kimik3.formats.k3._events import Event
from kimik3.types import ToolSpec

TOOLS = [ToolSpec.model_validate({"type": "function", "function": {"name": n, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}}}}})
    for n in ("read_file", "grep")]
# two calls given the same id, escapes and characters beyond ASCII, an empty call last
TEXT = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
    {"id": "c1", "function": {"name": "read_file", "arguments": {"path": 'a"\\é\n😀', "lines": 20}}},
    {"id": "c1", "function": {"name": "grep", "arguments": {"path": "b", "lines": 3}}},
    {"id": "c3", "function": {"name": "read_file", "arguments": {}}}]})
ARGUMENTS = ['{"path": "a\\"\\\\é\\n😀", "lines": 20}', '{"path": "b", "lines": 3}', "{}"]


async def streamed(text: str, chunk_size: int) -> list[Event]:
    async with Client(ScriptedEngine([text], chunk_size=chunk_size)).stream(
            [{"role": "user", "content": "read"}], tools=TOOLS) as call:
        return [e async for e in call if type(e).__name__.startswith("ToolCall")]


def shape(events: list[Event]) -> list[tuple[str, int, int, str]]:
    """The tool-call events as (kind, index, the id's order of appearance, delta), consecutive
    fragments of one call joined (the ids are minted per parse)."""
    ids: dict[str, int] = {}
    out: list[tuple[str, int, int, str]] = []
    for e in events:
        if not isinstance(e, (ToolCallStarted, ToolCallArgumentsDelta, ToolCallDone)):
            continue
        item = (type(e).__name__, e.index, ids.setdefault(e.id, len(ids)),
                e.delta if isinstance(e, ToolCallArgumentsDelta) else "")
        if out and item[0] == "ToolCallArgumentsDelta" and out[-1][:3] == item[:3]:
            out[-1] = (*item[:3], out[-1][3] + item[3])
        else:
            out.append(item)
    return out


async def test_at_every_chunk_size_the_events_are_the_parsers_with_fragments_joined() -> None:
    for size in range(1, len(TEXT) + 1):
        events = await streamed(TEXT, size)
        parser = StreamParser(True)
        plain = [e for i in range(0, len(TEXT), size) for e in parser.feed(TEXT[i:i + size])] + parser.finish("stop")
        assert shape(events) == shape(plain), size
        assert [e.arguments_json for e in events if isinstance(e, ToolCallDone)] == ARGUMENTS, size
        joined = ["".join(e.delta for e in events if isinstance(e, ToolCallArgumentsDelta) and e.index == i)
                  for i in range(3)]
        assert joined == ARGUMENTS, size


async def test_a_chunk_ending_one_call_and_starting_the_next_keeps_their_order() -> None:
    """One chunk holding every call: one delta each, between its start and its end, ids matching."""
    events = await streamed(TEXT, len(TEXT))
    assert [(type(e).__name__, e.index) for e in events] == [
        (kind, i) for i in range(3) for kind in ("ToolCallStarted", "ToolCallArgumentsDelta", "ToolCallDone")]
    assert [e.delta for e in events if isinstance(e, ToolCallArgumentsDelta)] == ARGUMENTS
    assert [e.id for e in events[0:3]] == [events[0].id] * 3 and events[3].id != events[0].id  # "c1" twice given
    # variant: a chunk from inside the first call's last value to inside the second call's first one
    size = TEXT.index("<|open|>call", TEXT.index("<|close|>call")) - TEXT.index('type="number"<|sep|>2') + 40
    middle = [e for e in await streamed(TEXT, size) if e.index < 2]
    assert shape(middle) == shape(
        [e for e in (await streamed(TEXT, 1)) if e.index < 2])


async def test_a_stream_cut_inside_a_call_ends_with_one_delta() -> None:
    one = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "c1", "function": {"name": "read_file", "arguments": {"path": "abc", "lines": 5}}}]})
    cut = one.index("<|close|>call<|sep|>") + len("<|close|>call<|sep|>")  # the call closed, its value held back
    events = await streamed(one[:cut], 10_000)
    deltas = [e.delta for e in events if isinstance(e, ToolCallArgumentsDelta)]
    assert deltas == ['{"path": "abc", "lines": ', '5}']  # the chunk's, then the end's: one, not "5" and "}"
    assert [e.arguments_json for e in events if isinstance(e, ToolCallDone)] == ['{"path": "abc", "lines": 5}']
