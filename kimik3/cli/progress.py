"""What the `kimik3` command prints while an agent runs: plain flushed lines or a rich live view,
the degraded-run report and one-line errors."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from .._exceptions import APIConnectionError, APITimeoutError, KimiK3Error
from .._models import MOONSHOT_HOSTS
from .._pricing import format_usd
from .._text import counted, escaped, printable, redact_urls, shown_call
from ..agents import (
    AgentEvent,
    CompactionEvent,
    ContentDelta,
    FinalEvent,
    PendingInput,
    ReasoningDelta,
    RunResult,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    ToolResultEvent,
    TurnEndEvent,
)
from ..tools import PLAN_TOOL_NAME, ToolResult
from ..types import Usage, message_text

PREVIEW_CHARS = 100


ARGUMENTS_CHARS = 200


STOP_REASONS = {
    "turn_budget": "the turn budget ran out, see --max-turns; the answer is the model's summary so far",
    "token_budget": "the token budget ran out; the answer is the model's summary so far",
    "time_budget": "the time budget ran out; the answer is the model's summary so far",
    "cost_budget": "the cost budget ran out, see --max-usd; the answer is the model's summary so far",
    "approval_required": "tool calls await a person's decision: kimik3 approve SESSION, then kimik3 resume SESSION",
    "input_required": "an MCP server asked a question no one could answer here: kimik3 answer SESSION ID TEXT, "
                      "then kimik3 resume SESSION",
    "invalid_output": "the answer did not match the required output schema",
    "unusable_output": "twice in a row the model's output had neither an answer nor a call that could run",
    "no_progress": "the model's replies were cut by the token limit again and again, see --max-tokens",
    "guardrail": "a guardrail tripped (docs/guardrails.md)",
    "loop_detected": "the model kept repeating the same tool calls with the same results; the run was stopped",
    "context_overflow": "the conversation no longer fits the model's context window, even with old tool results "
                        "cleared and old turns dropped; resume it with a new task, or a larger window",
}


MAX_ISSUES = 10


def compaction_text(event: CompactionEvent) -> str:
    """One line for a compaction: the summary's, or what went without the model (issue 41)."""
    if event.stopped:
        return event.stopped
    if event.summary:
        return f"compacted {event.removed_messages} earlier messages"
    done = [f"cleared {event.cleared_results} old tool result{'s' * (event.cleared_results != 1)}"] \
        if event.cleared_results else []
    if (n := event.removed_messages):
        done.append(f"dropped {n} message{'s' * (n != 1)} of the oldest turns")
    if event.failed:
        return event.failed + (f"; {', '.join(done)}" if done else "")
    return ", ".join(done) or "compaction removed nothing"


def _preview(result: ToolResult) -> str:
    """The first non-blank line of a result, whitespace collapsed, cut to PREVIEW_CHARS."""
    for line in printable(result.text).splitlines():
        if line.strip():
            line = " ".join(line.split())
            return line if len(line) <= PREVIEW_CHARS else line[:PREVIEW_CHARS] + "..."
    if not isinstance(result.content, str) and result.content:
        return "[image]"
    return "(empty)"


def _arguments(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= ARGUMENTS_CHARS else text[:ARGUMENTS_CHARS] + "..."


def shell_word(text: str) -> str:
    """``text`` as one shell word that :func:`~kimik3._text.printable` prints unchanged:
    :func:`shlex.quote`'s, or, where ``text`` holds a character ``printable`` drops (a control
    character, a bidirectional override), bash's ``$'...'`` with it escaped (``\\x01``,
    ``\\u202e``), so a printed line runs as printed. Example: ``shell_word("a\\x01b") == "$'a\\\\x01b'"``."""
    if printable(text) == text:
        return shlex.quote(text)
    return "$'" + "".join(f"\\{c}" if c in "\\'" else c if printable(c) == c
                          else f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}" for c in text) + "'"


def resume_line(session: str | Path, workspace: str | Path | None = None, extra: Sequence[str] = ()) -> str:
    """``kimik3 resume /abs/session [-w /abs/workspace] [EXTRA...]``: a "continue with" line that
    runs as printed from any folder (absolute paths, shell-quoted by :func:`shell_word`; issue 40);
    ``extra``: the run's engine options resume never takes from the session file
    (:func:`~kimik3.cli.recorded.code_argv`)."""
    words = ["kimik3", "resume", str(Path(session).resolve())]
    words += ["-w", str(Path(workspace).resolve())] if workspace is not None else []
    return " ".join(shell_word(w) for w in [*words, *extra])


def _next_lines(result: RunResult[Any] | None, session: Path | None, extra: Sequence[str] = ()) -> list[str]:
    """What to run next, as printed runnable lines: a run stopped for approvals names the
    ``approve`` and ``resume`` commands of its session (issue 40), one stopped on an MCP
    server's questions an ``answer`` line per call (issue 43)."""
    if result is None or session is None or result.stop_reason not in ("approval_required", "input_required"):
        return []
    where = shell_word(str(Path(session).resolve()))
    lines = [f"decide with: kimik3 approve {where}"] if result.pending_approvals else []
    lines += [f"answer with: kimik3 answer {where} {shlex.quote(escaped(p.id))} {_answer_form(p)}"
              for p in result.pending_inputs]
    return [*lines, f"continue with: {resume_line(session, extra=extra)}"]


def _answer_form(pending: PendingInput) -> str:
    """How ``kimik3 answer`` takes this call's answer: ``TEXT`` (one question of one field),
    ``--json '{}'`` (one URL-mode question, once done at its link), else ``--json JSON``."""
    requests = list(pending.input_requests.values())
    params = requests[0].get("params") if len(requests) == 1 and isinstance(requests[0], dict) else None
    if not isinstance(params, dict):
        return "--json JSON"
    if isinstance(params.get("url"), str):
        return "--json '{}'"
    schema = params.get("requestedSchema")
    fields = schema.get("properties") if isinstance(schema, dict) else None
    return "TEXT" if isinstance(fields, dict) and len(fields) == 1 else "--json JSON"


def degraded_lines(result: RunResult[Any]) -> list[str]:
    """The calls awaiting approval, and ``degraded: ...`` with the run's issues, for a run whose
    answer is not clean ([] when it is)."""
    waiting = [shown_call(f"awaiting approval: {escaped(p.name)} ", p.arguments,  # whole: decided on
                          f"  id={escaped(p.id)}")
               for p in result.pending_approvals]
    waiting += [line for p in result.pending_inputs for line in p.shown("awaiting an answer: ")]
    trip = result.guardrail
    if trip is not None:
        waiting.append(f"guardrail {printable(trip.name)!r} ({trip.stage})" + (f": {printable(trip.message)}"
                                                                              if trip.message else ""))
    if not result.issues:
        return waiting
    counts = [f"{n} {what} call{'' if n == 1 else 's'}" for n, what in
              ((result.cut_calls, "cut"), (result.dropped_calls, "dropped"), (result.failed_calls, "failed")) if n]
    issues = f"{len(result.issues)} issue{'' if len(result.issues) == 1 else 's'}"
    lines = [*waiting, f"degraded: {', '.join([*counts, issues])}", *(f"  {i}" for i in result.issues[:MAX_ISSUES])]
    if len(result.issues) > MAX_ISSUES:
        lines.append(f"  ... and {len(result.issues) - MAX_ISSUES} more")
    return lines


def calls_text(ran: int, result: RunResult[Any]) -> str:
    """``3 tool calls``, or for a run stopped with calls that wait (for approval, for an MCP
    server's answer) ``0 tool calls run, 1 waits``: a waiting call is neither run nor lost."""
    waiting = len(result.pending_approvals) + len(result.pending_inputs)
    if not waiting:
        return counted(ran, "tool call")
    return f"{counted(ran, 'tool call')} run, {waiting} wait{'s' if waiting == 1 else ''}"


def _spend(usage: Usage, cost: float | None) -> str:
    """``, 45% cached, $0.0123``: the share of prompt tokens served from the prefix cache (when the
    engine reports it) and the USD cost (when the run is priced); "" when neither is known."""
    parts = []
    if usage.prompt_tokens_details is not None and usage.prompt_tokens:
        parts.append(f"{usage.cached_tokens / usage.prompt_tokens:.0%} cached")
    if cost is not None:
        parts.append(format_usd(cost))
    return "".join(", " + p for p in parts)


def one_line(e: BaseException) -> str:
    """``Type: message`` on one line: URLs redacted, terminal controls dropped."""
    message = " ".join(printable(redact_urls(str(e))).split())
    line = f"{type(e).__name__}: {message}" if message else type(e).__name__
    return line + _hint(e)


def _hint(e: BaseException) -> str:
    """What to try, after an error line for an endpoint that did not answer: a local one is a
    server not started; another is named with what stands between (issue 43: "Connection error."
    alone said neither which host nor what to check), and the system's own reason when the error
    carries one (``[Errno -2] Name or service not known``)."""
    if not isinstance(e, APIConnectionError) or isinstance(e, APITimeoutError) or not e.url:
        return ""
    try:
        host = urlsplit(e.url).hostname or ""
    except ValueError:
        return ""
    if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127."):
        return " (is the server running? `kimik3 serve MODEL_DIR` starts one)"
    if not host:
        return ""
    why = _root_cause(e)
    said = f"; the system said: {why}" if why else ""
    moonshot = ("; Moonshot's API is api.moonshot.ai, api.moonshot.cn from mainland China"
                if host in MOONSHOT_HOSTS else "")
    return (f" (nothing answered at {host}{said}: check this machine's network, the host name, a proxy "
            f"(HTTPS_PROXY / HTTP_PROXY) or a firewall{moonshot}; the endpoint is --base-url / KIMIK3_BASE_URL)")


def _root_cause(e: BaseException) -> str:
    """The text of the innermost exception ``e`` was raised from (the OS's reason), "" when it is
    ``e``'s own or says nothing."""
    inner, seen = e, {id(e)}
    while (nxt := inner.__cause__ or inner.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        inner = nxt
    text = " ".join(str(inner).split())[:200] if inner is not e else ""
    return text if text and text not in str(e) else ""


class ProgressView(Protocol):
    resume_args: list[str]  # the run's code options, given again by a "continue with" line
    def start(self) -> None: ...
    def event(self, event: AgentEvent) -> None: ...
    def stop(self) -> None: ...
    def note(self, text: str) -> None: ...
    def summary(self, result: RunResult[Any] | None, session: Path | None) -> None: ...
    def error(self, e: BaseException) -> None: ...


class PlainProgress:
    """Flushed plain lines (not a terminal): the stable format of the module docstring."""

    def __init__(self) -> None:
        self.turn = 1
        self.tool_calls = 0
        self.resume_args: list[str] = []
        self._text = ""  # content of the current turn not yet shown

    def _echo(self, line: str) -> None:
        click.echo(printable(line))  # flushes; model text cannot send terminal escapes

    def start(self) -> None:
        self.turn = 1
        self._text = ""

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, ContentDelta):
            self._text += event.delta
        elif isinstance(event, ToolCallDone):
            if self._text.strip():
                self._echo(f"[turn {self.turn}] text: {self._text.strip()}")
            self._text = ""
            self._echo(f"[turn {self.turn}] tool {event.name} {_arguments(event.arguments)}")
        elif isinstance(event, ToolCallIncomplete):
            self._echo(f"[turn {self.turn}] dropped an incomplete call to {event.name}")
        elif isinstance(event, ToolResultEvent):
            self.tool_calls += 1
            self._echo(f"[turn {self.turn}] result {event.name}: {_preview(event.result)}")
            if event.name == PLAN_TOOL_NAME and not event.result.is_error:
                for line in event.result.text.splitlines()[1:]:
                    self._echo(f"[turn {self.turn}] plan {line}")
        elif isinstance(event, TurnEndEvent):
            text = message_text(event.message.content).strip()
            if not event.message.tool_calls:
                self._echo(f"[turn {event.turn}] answer: {text or '(no text)'}")
            elif self._text.strip():
                self._echo(f"[turn {event.turn}] text: {self._text.strip()}")
            self._text = ""
            self.turn = event.turn + 1
        elif isinstance(event, CompactionEvent):
            self._echo(f"[turn {self.turn}] {compaction_text(event)}")

    def stop(self) -> None:
        pass

    def note(self, text: str) -> None:
        self._echo(text)

    def summary(self, result: RunResult[Any] | None, session: Path | None) -> None:
        if result is not None:
            if result.stop_reason != "completed":
                self._echo(f"stopped: {result.stop_reason} ({STOP_REASONS.get(result.stop_reason, '')})")
            for line in degraded_lines(result):
                self._echo(line)
            self._echo(f"usage: {counted(result.turns, 'turn')}, {calls_text(self.tool_calls, result)}, "
                       f"{result.usage.total_tokens} tokens{_spend(result.usage, result.cost)}")
        if session is not None:
            self._echo(f"session: {session}")
        for line in _next_lines(result, session, self.resume_args):
            self._echo(line)

    def error(self, e: BaseException) -> None:
        click.echo(f"error: {one_line(e)}", err=True)


class _RichProgress:
    """Live progress on a terminal: a status line, dimmed reasoning, tool calls, the answer."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.turn = 1
        self.tool_calls = 0
        self.resume_args: list[str] = []
        self.tokens = 0
        self.usage = Usage()  # summed over the turns shown, for the cache-hit share
        self.cost: float | None = None
        self.phase = "waiting for the model"
        self._started = time.monotonic()
        self._buf = ""
        self._style = ""
        self._kind: str | None = None
        self._spinner = Spinner("dots", style="cyan")
        self._live: Live | None = None
        self.plan = ""  # the last update_plan result, shown above the status line

    def __rich__(self) -> RenderableType:
        elapsed = time.monotonic() - self._started
        spend = "".join(f" · {p}" for p in _spend(self.usage, self.cost).split(", ") if p)
        status = (f"turn {self.turn} · {counted(self.tool_calls, 'tool call')} · {self.tokens:,} tokens{spend} · "
                  f"{elapsed:.0f}s · {self.phase}")
        self._spinner.update(text=Text(status, style="dim"))
        parts: list[RenderableType] = [Text(self._buf, style=self._style)] if self._buf else []
        if self.plan:
            parts.append(Text(self.plan, style="cyan"))
        return Group(*parts, self._spinner) if parts else self._spinner

    def _print(self, renderable: RenderableType) -> None:
        self.console.print(renderable)

    def start(self) -> None:
        self.turn = 1
        self._started = time.monotonic()
        self.phase = "waiting for the model"
        self._live = Live(self, console=self.console, transient=True, refresh_per_second=8,
                          redirect_stdout=False, redirect_stderr=False)
        self._live.start()

    def stop(self) -> None:
        self._flush()
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _flush(self) -> None:
        if self._buf:
            self._print(Text(self._buf, style=self._style))
        self._buf = ""

    def _stream(self, kind: str, delta: str) -> None:
        delta = printable(delta)  # model text cannot send terminal escapes
        if kind != self._kind:
            self._flush()
            if self._kind == "reasoning" and kind == "content":
                self._print(Text(""))
            self._kind = kind
            self._style = "dim" if kind == "reasoning" else ""
            self.phase = "thinking" if kind == "reasoning" else "answering"
        self._buf += delta
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            self._print(Text(line, style=self._style))
        width = max(20, self.console.width - 1)
        while len(self._buf) > width:  # commit long lines as they wrap
            cut = self._buf.rfind(" ", 0, width)
            cut = cut if cut > 0 else width
            self._print(Text(self._buf[:cut], style=self._style))
            self._buf = self._buf[cut:].lstrip(" ")

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, ReasoningDelta):
            self._stream("reasoning", event.delta)
        elif isinstance(event, ContentDelta):
            self._stream("content", event.delta)
        elif isinstance(event, ToolCallStarted):
            self._flush()
            self._kind = None
            self.phase = f"calling {event.name}"
        elif isinstance(event, ToolCallDone):
            self._print(Text.assemble(("→ ", "cyan"), (printable(event.name), "bold cyan"), " ",
                                      (_arguments(event.arguments), "dim")))
            self.phase = "running tools"
        elif isinstance(event, ToolCallIncomplete):
            self._print(Text(f"dropped an incomplete call to {printable(event.name)}", style="yellow"))
        elif isinstance(event, ToolResultEvent):
            self.tool_calls += 1
            mark, style = ("✗", "red") if event.result.is_error else ("✓", "green")
            self._print(Text.assemble(("  " + mark + " ", style), (printable(event.name), "bold"), ": ",
                                      (_preview(event.result), "dim")))
            if event.name == PLAN_TOOL_NAME and not event.result.is_error:
                self.plan = printable(event.result.text)
        elif isinstance(event, TurnEndEvent):
            self._flush()
            self._kind = None
            self.tokens += event.usage.total_tokens
            self.usage = self.usage + event.usage
            if event.cost is not None:
                self.cost = (self.cost or 0.0) + event.cost
            self.turn = event.turn + 1
            self.phase = "waiting for the model"
        elif isinstance(event, FinalEvent):
            self.turn = event.result.turns
            self.phase = "done"
        elif isinstance(event, CompactionEvent):
            self._print(Text(compaction_text(event), style="dim yellow"))

    def note(self, text: str) -> None:
        self._print(Text(text, style="dim"))

    def summary(self, result: RunResult[Any] | None, session: Path | None) -> None:
        if result is not None:
            if result.stop_reason != "completed":
                why = STOP_REASONS.get(result.stop_reason, "")
                self._print(Text(f"stopped: {result.stop_reason} ({why})", style="bold yellow"))
            for line in degraded_lines(result):
                self._print(Text(line, style="yellow"))
            spend = "".join(f" · {p}" for p in _spend(result.usage, result.cost).split(", ") if p)
            self._print(Text(f"{counted(result.turns, 'turn')} · {calls_text(self.tool_calls, result)} · "
                             f"{result.usage.total_tokens:,} tokens{spend}", style="dim"))
        if session is not None:
            self._print(Text(f"session: {session}", style="dim"))
        for line in _next_lines(result, session, self.resume_args):
            self._print(Text(line))

    def error(self, e: BaseException) -> None:
        Console(stderr=True).print(Text(f"error: {one_line(e)}", style="bold red"))


def progress_view(plain: bool) -> ProgressView:
    """The live rich view on a terminal, else (or with ``--plain``) the plain flushed lines."""
    console = Console(highlight=False)
    if console.is_terminal and not plain:
        return _RichProgress(console)
    return PlainProgress()


def typed_error(e: BaseException) -> BaseException | None:
    """The kimik3 (or OS) error behind ``e``, unwrapping exception groups; None for others."""
    if isinstance(e, (KimiK3Error, OSError)):
        return e
    inner = getattr(e, "exceptions", None)
    if isinstance(inner, tuple):
        for sub in inner:
            found = typed_error(sub)
            if found is not None:
                return found
    return None


