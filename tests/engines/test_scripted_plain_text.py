"""ScriptedEngine: a reply without K3 markers is the answer; its docstring example runs (issue 16,
item 4)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kimik3 import Client, ScriptedEngine
from kimik3.engines import _scripted

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("effort", ["max", "low", "none"])
@pytest.mark.parametrize("text", ["Hello!", "two\nlines <b>html</b> & {json: 1}", "a < b > c | d"])
async def test_plain_text_is_the_answer_thinking_on_or_off(text: str, effort: str) -> None:
    engine = ScriptedEngine([text], chunk_size=3)
    out = await Client(engine).chat([{"role": "user", "content": "Hi"}], reasoning_effort=effort)
    reasoning = None if effort == "none" else ""  # thinking off: no think channel at all
    assert (out.message.content, out.message.reasoning_content, out.finish_reason) == (text, reasoning, "stop")
    assert out.message.tool_calls is None


async def test_text_with_markers_is_raw_k3_output_as_before() -> None:
    cut = "still thinking<|close|>think<|sep|>"  # raw, not closed: a max_tokens cut
    out = await Client(ScriptedEngine([cut])).chat([{"role": "user", "content": "Hi"}])
    assert (out.message.content, out.message.reasoning_content, out.finish_reason) == ("", "still thinking", "length")


def test_docstring_example_runs() -> None:
    doc = _scripted.ScriptedEngine.__doc__ or ""
    block = doc.split("Example: an agent offline, one tool call then the answer::", 1)[1]
    code_lines: list[str] = []
    for line in block.splitlines()[1:]:
        if line.strip() and not line.startswith("        "):
            break
        code_lines.append(line[8:])
    code = "\n".join(code_lines).strip() + "\nprint('ran', result.output)\n"
    assert re.search(r"render_output\(", code) and "assert result.output ==" in code
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "ran 2 + 3 = 5.\n"
