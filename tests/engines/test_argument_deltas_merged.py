"""A token engine's chunk carries one arguments delta per call (issue 44): the parser's
fragments of one chunk are merged, their text unchanged; fragments of different chunks stay apart."""

from __future__ import annotations

from kimik3 import Client, ScriptedEngine
from kimik3.formats.k3 import ToolCallArgumentsDelta, ToolCallDone, render_output
from kimik3.types import ToolSpec

TOOLS = [ToolSpec.model_validate({"type": "function", "function": {
    "name": "read_file", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "lines": {"type": "integer"}}}}})]


def _call(path: str) -> str:
    return render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "c1", "function": {"name": "read_file", "arguments": {"path": path, "lines": 20}}}]})


async def _deltas(text: str, chunk_size: int) -> tuple[list[str], str]:
    async with Client(ScriptedEngine([text], chunk_size=chunk_size)).stream(
            [{"role": "user", "content": "read it"}], tools=TOOLS) as call:
        events = [e async for e in call]
    done = next(e for e in events if isinstance(e, ToolCallDone))
    return [e.delta for e in events if isinstance(e, ToolCallArgumentsDelta)], done.arguments_json


async def test_one_chunk_gives_one_arguments_delta() -> None:
    deltas, arguments = await _deltas(_call("src/m7.py"), chunk_size=10_000)
    assert deltas == ['{"path": "src/m7.py", "lines": 20}']
    assert arguments == '{"path": "src/m7.py", "lines": 20}'


async def test_fragments_of_separate_chunks_stay_apart_and_join_to_the_arguments() -> None:
    text = _call("a/b.py")
    deltas, arguments = await _deltas(text, chunk_size=7)
    assert "".join(deltas) == arguments == '{"path": "a/b.py", "lines": 20}'
    assert len(deltas) > 1  # streamed as the chunks arrive, not held to the end
