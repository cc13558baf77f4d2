"""Suites written into a temporary directory, and ScriptedEngine scripts keyed by task, so
attempts that run concurrently each get their own task's replies."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kimik3.formats.k3 import render_output
from kimik3.types import AssistantMessage, Message, UserMessage, message_text


def calls(*items: tuple[str, dict[str, Any]], reasoning: str = "plan") -> str:
    """A raw K3 output calling the given tools (in parallel)."""
    return render_output({"reasoning_content": reasoning, "content": "",
                          "tool_calls": [{"id": f"c{i}", "function": {"name": n, "arguments": a}}
                                         for i, (n, a) in enumerate(items)]})


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)


def write_task(suite: Path, name: str, instruction: str, check: str, files: dict[str, str] | None = None,
               **fields: Any) -> Path:
    """A task folder with task.toml (and workspace/ when ``files`` is given)."""
    folder = suite / name
    folder.mkdir(parents=True)
    lines = [f"instruction = {toml_value(instruction)}", f"check = {toml_value(check)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in fields.items()]
    (folder / "task.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for rel, text in (files or {}).items():
        p = folder / "workspace" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return folder


def answer_has(text: str) -> str:
    return f"grep -qF -- '{text}' \"$KIMIK3_EVAL_ANSWER\""


Replies = dict[str, Sequence[str]]


def by_task(replies: Replies, before: Callable[[str, int], Awaitable[None]] | None = None
            ) -> Callable[[list[Message]], Awaitable[str]]:
    """A ScriptedEngine function: the reply for the run's task (its first user message) and turn
    (assistant messages so far); ``before(task, turn)`` is awaited first."""

    async def respond(messages: list[Message]) -> str:
        task = next(message_text(m.content) for m in messages if isinstance(m, UserMessage))
        turn = sum(isinstance(m, AssistantMessage) for m in messages)
        if before is not None:
            await before(task, turn)
        return replies[task][turn]

    return respond


def tree_hash(root: Path) -> str:
    """sha256 of every path, mode and byte under ``root`` (symlinks as their target)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + dirnames):
            p = Path(dirpath, name)
            st = p.lstat()
            h.update(f"{p.relative_to(root)}\0{st.st_mode}\0{st.st_mtime_ns}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()
