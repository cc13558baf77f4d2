"""Chat mode's checker: what an OpenAI-compatible server streams, turned into kimik3's events and
one completion (pure, no I/O; the transport is :class:`~kimik3.engines.RemoteEngine`).

In chat mode the server renders K3's prompt and parses K3's output; kimik3 checks what comes back.
:class:`ChatStreamChecker` takes the ``chat.completion.chunk`` dicts of a stream (or one non-streaming
``chat.completion``) and holds up against every shape servers are known to send. The decisions,
where servers disagree, are in ``docs/chat-mode.md``; in short:

- Text a server parsed arrives intact (a trailing ``<``, a quoted marker). Only marker text that
  is K3 structure (a channel or tools section a server leaked) is read as structure, by the K3
  package's own reader (:mod:`kimik3.formats.k3._recover`, on the raw parser); a call read that
  way runs only when the request declared its tool, and a call outside a tools section never.
- ``tool_choice="required"`` answered with a ``{"name": ..., "parameters": ...}`` JSON object as
  content and no call (SGLang #33192): that object is the call.
- Tool-call deltas: one without ``index`` continues the open call; a new ``id`` starts a new one
  (not mid-arguments: servers that mint an id per chunk); a name may come in pieces; id, name and
  arguments may come in any order. The deltas of a call concatenate to its final
  arguments JSON. Ids are kimik3's: a server's id is kept when it is unique within the turn.
- Arguments are decoded leniently only where the intent is unambiguous (a raw control character
  inside a string, one extra level of JSON encoding); otherwise the call is kept as a
  :class:`~kimik3.types.FailedToolCall`, as is a call beyond kimik3's JSON limits
  (:mod:`kimik3._json`: nesting, integer digits, NaN / Infinity).
- A stream that ends with neither ``finish_reason`` nor ``[DONE]`` was cut: the completion is
  ``truncated``. An in-band error object raises the typed error its code names.
- Channels: thinking off, reasoning-only text is the answer; thinking on, a cut answer with no
  reasoning is unclosed thinking (the raw parser's rules). kimik3 logs a warning when it relabels.

- Usage is read where servers put it (``choices[0].usage`` first, as Kimi's API and the Vendor
  Verifier do, then the top-level ``usage``); none at all, or zeros for an answer with text, is a
  :class:`~kimik3.types.Usage` marked ``unknown``.

Interface: ``check = ChatStreamChecker.for_request(request, model)``; ``check.feed(chunk)`` per
chunk (or ``check.feed_response(body)``) returns events; ``check.finish(done=...)`` the last
ones; then ``check.completion()``.

At the ~600-line guide on purpose (issue 42, point 5): the module is one state machine over one
answer. Its text channels, tool-call deltas and leaked markup decide one another (content is held
while no call has come; calls read from markup or JSON take their indices and ids after the
streamed ones; the completion's issues come from all three), so they share the checker's state.
What stands apart is elsewhere: decoding arguments in :mod:`._arguments`, reading the usage in
:mod:`._usage`, reading K3 markup in :mod:`kimik3.formats.k3._recover`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .._exceptions import APIResponseValidationError
from ..formats.k3 import (
    ContentDelta,
    Event,
    MarkedText,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    holds_markup,
    new_tool_call_id,
    read_marked,
)
from ..types import (
    CLOSED_MID_ANSWER,
    AssistantMessage,
    ChatCompletion,
    ChatRequest,
    Choice,
    FailedToolCall,
    FinishReason,
    FunctionCall,
    SystemMessage,
    ToolCall,
    Usage,
    clamp_usage,
)
from ._arguments import Escaper, decode_arguments, escape_controls, json_calls
from ._http import error_from_payload, is_error_payload
from ._usage import read_usage

__all__ = ["ChatStreamChecker"]

log = logging.getLogger("kimik3.engines.chat")

_NORMAL_STOPS = frozenset({"stop", "tool_calls", "function_call", "eos", "end_turn", "stop_sequence"})
_CUT_STOPS = frozenset({"length", "max_tokens"})

class _Call:
    """One tool call as a server streams it."""

    __slots__ = ("escaper", "id", "index", "mode", "name", "pieces", "sent", "server_id")

    def __init__(self, server_id: str | None) -> None:
        self.server_id = server_id
        self.name = ""
        self.id = ""  # set when started
        self.index = -1
        self.pieces: list[str] = []  # arguments, control characters escaped
        self.sent = 0  # pieces already sent as deltas
        self.mode: Literal["", "object", "string"] = ""  # decided by the first non-blank char
        self.escaper = Escaper()

    def complete(self) -> bool:
        """Its arguments are a whole JSON object (cheap tests first: brackets balance, they end
        in ``}``; decoded only then)."""
        if self.escaper.depth != 0 or self.escaper.in_string:
            return False
        last = next((p for p in reversed(self.pieces) if p.strip()), "")
        return last.rstrip().endswith("}") and decode_arguments("".join(self.pieces))[0] is not None


# -- the assembler ---------------------------------------------------------------------------


class ChatStreamChecker:
    """Turns one chat-completions answer into kimik3 events and a :class:`ChatCompletion`.

    Feed every ``chat.completion.chunk`` with :meth:`feed` (or a non-streaming
    ``chat.completion`` with :meth:`feed_response`), then call :meth:`finish` and
    :meth:`completion`. Each call returns the events the new data completes.

    Args:
        thinking: whether thinking was on for the request.
        model: the model name for the completion (a chunk's ``model`` wins).
        tools: the names of the tools the request declared (its ``tools`` and its messages'
            dynamic declarations): a call read from markup or JSON a server left in the text
            runs only when its name is one of them, else it is a failed call.
        tool_choice: the request's ``tool_choice`` (``"required"``: see the module docstring).
        id_factory: makes kimik3's tool-call ids (default :func:`~kimik3.formats.k3.new_tool_call_id`).

    Raises:
        APIStatusError (a subclass by code): the server sent an error object (:meth:`feed`).
        APIResponseValidationError: a chunk that is not the chat-completions shape.
    """

    def __init__(
        self,
        thinking: bool,
        model: str = "",
        *,
        tools: Iterable[str] = (),
        tool_choice: Any = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.thinking = thinking
        self.model = model
        self._tools = frozenset(tools)
        self._tool_choice = tool_choice
        self._new_id = id_factory or new_tool_call_id
        self._reasoning = MarkedText()
        self._content = MarkedText()
        self._misplaced: list[str] = []
        self._read: list[str] = []  # fields whose leaked markup was read as structure (an issue each)
        self._held_reasoning: list[str] = []  # thinking off: reasoning not yet known to be reasoning
        self._held_content: list[str] = []  # thinking on: content not yet known to be content
        self._saw_reasoning = False
        self._saw_content = False
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._ids: set[str] = set()
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._clamped: list[str] | None = None  # what clamp_usage changed (ChatCompletion.issues)
        self._done = False
        self.received = False
        """Whether any chunk arrived (an empty stream is a failed request, not an answer)."""
        self._choices = False  # a chunk carried choice 0
        self.cache_lifetime: str | None = None
        """The request's ``prompt_cache_lifetime`` (``"1h"``: its cache writes are 1-hour ones)."""
        self._started = 0  # calls started (their indices)
        self._final: list[ToolCall] = []
        self._failed: list[FailedToolCall] = []
        self._dropped: list[str] = []
        self._truncated = False

    @classmethod
    def for_request(cls, request: ChatRequest, model: str = "") -> ChatStreamChecker:
        """The checker of one request's answer (its thinking, declared tools and tool_choice)."""
        tools = [t.function.name for t in request.tools]
        tools += [t.function.name for m in request.messages if isinstance(m, SystemMessage) for t in m.tools or ()]
        checker = cls(request.thinking, model, tools=tools, tool_choice=request.tool_choice)
        checker.cache_lifetime = request.settings.prompt_cache_lifetime  # the lifetime its cache writes have
        return checker

    # -- input -----------------------------------------------------------------------------------

    def feed(self, chunk: Any) -> list[Event]:
        """One ``chat.completion.chunk``: a dict, as decoded from an SSE ``data:`` line (or an
        openai-python ``ChatCompletionChunk``)."""
        return self._take(chunk, "delta")

    def feed_response(self, response: Any) -> list[Event]:
        """A whole non-streaming ``chat.completion`` (a server that ignored ``stream: true``)."""
        events = self._take(response, "message")
        self._done = True
        return events

    def _take(self, chunk: Any, key: str) -> list[Event]:
        if hasattr(chunk, "model_dump"):  # an openai-python model: its JSON shape, extra fields kept
            chunk = chunk.model_dump(mode="json", exclude_unset=True)
        if not isinstance(chunk, Mapping):
            raise APIResponseValidationError(f"a chunk that is not a JSON object: {chunk!r:.200}")
        if is_error_payload(chunk):
            raise error_from_payload(chunk)
        self.received = True
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        out: list[Event] = []
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise APIResponseValidationError(f"'choices' is not a list: {choices!r:.200}")
        # usage where servers put it: choices[0].usage (Kimi's API; read first, as the Vendor
        # Verifier does), else the chunk's own
        usages = [c.get("usage") for c in choices if isinstance(c, Mapping) and c.get("index") in (0, None)]
        usage = next((u for u in (*usages, chunk.get("usage")) if isinstance(u, Mapping)), None)
        if usage is not None:
            self._usage = read_usage(usage, self.cache_lifetime)
        for choice in choices:
            if not isinstance(choice, Mapping) or choice.get("index") not in (0, None):
                continue  # kimik3 asks for one choice
            self._choices = True
            delta, whole = choice.get(key), key == "message"
            if delta is None:  # proxies: a stream chunk with a whole message, a body with a delta, or text
                other = "message" if key == "delta" else "delta"
                delta, whole = choice.get(other), other == "message"
                if delta is None and isinstance(choice.get("text"), str):
                    delta = {"content": choice["text"]}
            delta = delta or {}
            if not isinstance(delta, Mapping):
                raise APIResponseValidationError(f"'{key}' is not an object: {delta!r:.200}")
            reasoning = _str(delta, "reasoning_content") or _str(delta, "reasoning")
            if reasoning:
                out += self._on_reasoning(reasoning)
            content = _str(delta, "content")
            if content:
                out += self._on_content(content)
            tool_calls = delta.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                raise APIResponseValidationError(f"'tool_calls' is not a list: {tool_calls!r:.200}")
            for k, tc in enumerate(tool_calls):
                if not isinstance(tc, Mapping):
                    raise APIResponseValidationError(f"a tool call that is not an object: {tc!r:.200}")
                out += self._flush_held()
                if whole and tc.get("index") is None:
                    tc = {**tc, "index": k}
                out += self._on_tool_call(tc)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._finish_reason = reason
        return out

    # -- text --------------------------------------------------------------------------------------

    def _on_reasoning(self, text: str) -> list[Event]:
        if not self.thinking and not self._saw_content and not self._calls:
            self._held_reasoning.append(text)  # may be the answer, mislabelled (decided at the end)
            return []
        self._saw_reasoning = True
        out = self._flush_held()
        delta = self._reasoning.feed(text)
        return out + ([ReasoningDelta(delta)] if delta else [])

    def _on_content(self, text: str) -> list[Event]:
        if ((self.thinking and not self._saw_reasoning) or self._tool_choice == "required"
                or self._reasoning.held is not None) and not self._calls:
            # may be unclosed thinking, mislabelled, (tool_choice "required") a call sent as JSON
            # text, or come after answer text the reasoning's markup holds: decided at the end
            self._held_content.append(text)
            return []
        self._saw_content = True
        out = self._flush_held()
        delta = self._content.feed(text)
        return out + ([ContentDelta(delta)] if delta else [])

    def _flush_held(self) -> list[Event]:
        """Held text whose channel is now known to be the one the server said."""
        out: list[Event] = []
        if self._held_reasoning:
            text, self._held_reasoning = "".join(self._held_reasoning), []
            self._saw_reasoning = True
            if delta := self._reasoning.feed(text):
                out.append(ReasoningDelta(delta))
        if self._held_content:
            text, self._held_content = "".join(self._held_content), []
            self._saw_content = True
            if delta := self._content.feed(text):
                out.append(ContentDelta(delta))
        return out

    # -- tool calls ------------------------------------------------------------------------------

    def _on_tool_call(self, tc: Mapping[str, Any]) -> list[Event]:
        index = tc.get("index")
        if not (index is None or (isinstance(index, int) and not isinstance(index, bool))):
            raise APIResponseValidationError(f"a tool-call index that is not an integer: {index!r:.80}")
        server_id = tc.get("id") if isinstance(tc.get("id"), str) and tc.get("id") else None
        function = tc.get("function") or {}
        if not isinstance(function, Mapping):
            raise APIResponseValidationError(f"a tool call's 'function' is not an object: {function!r:.200}")
        name = function.get("name") if isinstance(function.get("name"), str) else None
        args = function.get("arguments")
        if isinstance(args, (Mapping, list)):  # some servers send the decoded object
            args = json.dumps(args, ensure_ascii=False)
        elif args is not None and not isinstance(args, str):
            raise APIResponseValidationError(f"tool-call arguments that are not text: {args!r:.200}")

        call = self._call_for(index, server_id, name)
        if server_id and call.server_id and server_id != call.server_id:
            log.warning("kimik3: the server changed tool call %r's id to %r mid-arguments; kept the first",
                        call.server_id, server_id)
        call.server_id = call.server_id or server_id
        if name and name != call.name:
            if name.startswith(call.name):  # the first piece, or the whole name so far resent
                call.name = name
            elif not call.id:  # a name split across deltas (the call starts with its arguments)
                call.name += name
            else:
                log.warning("kimik3: tool call %s named %r, then %r; the name is their join", call.id, call.name, name)
                call.name += name
        if args:
            piece = call.escaper.feed(args)
            call.pieces.append(piece)
            if not call.mode and piece.strip():
                call.mode = "string" if piece.lstrip()[0] == '"' else "object"
        out: list[Event] = []
        if not call.id and call.name and call.mode:
            call.index, self._started = self._started, self._started + 1
            call.id = self._unique(call.server_id)
            out.append(ToolCallStarted(call.index, call.id, call.name))
        if call.id and call.mode == "object" and call.sent < len(call.pieces):
            text = "".join(call.pieces[call.sent :])
            call.sent = len(call.pieces)
            out.append(ToolCallArgumentsDelta(call.index, call.id, text))
        return out

    def _call_for(self, index: int | None, server_id: str | None, name: str | None) -> _Call:
        """The call a delta continues: by ``index``; without one, the open call. A different id
        starts a new call, unless the open call is mid-arguments and the delta names no other
        function (a server that changes the id mid-call); a name after complete arguments starts
        a new call, unless it only repeats the call's name."""
        call = self._by_index.get(index) if index is not None else (self._calls[-1] if self._calls else None)
        if call is not None:
            other_name = name is not None and bool(call.name) and name != call.name
            new_id = server_id is not None and call.server_id is not None and server_id != call.server_id
            if new_id and not other_name:  # a new id mid-arguments, or with neither name nor arguments
                new_id = call.complete() if call.mode else name is not None  # before it: the same call
            again = name is not None and bool(call.name) and (other_name or index is None) and call.complete()
            if not (new_id or again):
                return call
        call = _Call(server_id)
        self._calls.append(call)
        if index is not None:
            self._by_index[index] = call
        return call

    def _unique(self, server_id: str | None) -> str:
        """The server's id when it is new in this turn, else a fresh kimik3 id."""
        if server_id and server_id not in self._ids:
            call_id = server_id
        else:
            if server_id:
                log.warning("kimik3: the server sent tool-call id %r twice in one turn; renamed the second", server_id)
            call_id = self._new_id()
            while call_id in self._ids:
                call_id = self._new_id()
        self._ids.add(call_id)
        return call_id

    # -- the end ---------------------------------------------------------------------------------

    def finish(self, *, done: bool = False) -> list[Event]:
        """End of the answer.

        Args:
            done: the server ended the stream properly (``data: [DONE]``). Without it and without
                a ``finish_reason``, the answer was cut (a closed connection): ``truncated``.

        Returns:
            The last events: held text, text and calls recovered from leaked K3 markup, and each
            tool call's end (:class:`ToolCallDone`, or :class:`ToolCallIncomplete` for a call cut
            or failed).

        Raises:
            APIResponseValidationError: chunks arrived but none carried a choice.
        """
        if self.received and not self._choices:
            raise APIResponseValidationError("the answer had no choices (not a chat completion)")
        done = done or self._done
        reason = self._finish_reason
        if reason is None:
            cut = not done
            if cut:
                log.warning("kimik3: the stream ended with no finish_reason and no [DONE]: the answer is truncated")
        elif reason in _NORMAL_STOPS:
            cut = False
        else:
            cut = True
            if reason not in _CUT_STOPS:
                log.warning("kimik3: finish_reason %r: the answer is treated as truncated", reason)
        self._truncated = cut
        out: list[Event] = []
        no_reasoning = self.thinking and not self._saw_reasoning  # the server sent no reasoning
        if self._held_reasoning:  # thinking off, only reasoning came: it is the answer
            log.warning("kimik3: thinking is off but the server labelled the answer reasoning; relabelled as content")
            text, self._held_reasoning = "".join(self._held_reasoning), []
            self._saw_content = True
            if delta := self._content.feed(text):
                out.append(ContentDelta(delta))
        fresh = ""  # content first passed on now: text that may yet turn out to be reasoning
        recovered: list[ParsedToolCall] = []
        if self._held_content:
            text, self._held_content = "".join(self._held_content), []
            if cut and no_reasoning:  # thinking on, cut, no reasoning: unclosed thinking the server called content
                log.warning("kimik3: the server labelled unclosed thinking (a cut answer) content; now reasoning")
                self._saw_reasoning = True
                if delta := self._reasoning.feed(text):
                    out.append(ReasoningDelta(delta))
            elif (json_calls := self._json_calls(text)) is not None:
                log.warning("kimik3: tool_choice is 'required' and the server sent the call as JSON content; "
                            "read as %d call(s)", len(json_calls))
                recovered += json_calls
            else:
                self._saw_content = True
                fresh = self._content.feed(text)
        out += self._read_markup(fresh, no_reasoning, recovered)
        for call in self._calls:
            out += self._end_call(call, cut)
        for parsed_call in recovered:
            out += self._end_recovered(parsed_call)
        return out

    def _read_markup(self, fresh: str, no_reasoning: bool, recovered: list[ParsedToolCall]) -> list[Event]:
        """Each field's held text: K3 structure a server left in it (read by the K3 package's
        reader), else text, released intact. ``fresh``: content not passed on yet, which is
        reasoning when the content reads as K3 output from the think channel (a server that
        never split the reasoning off: SGLang #32677)."""
        out: list[Event] = []
        answered = bool(self._content.text or self._content.held or self._content.tail or fresh or self._calls)
        for kind, field in (("reasoning", self._reasoning), ("content", self._content)):
            held = "".join(field.held or ())
            if not held and self._truncated and field.tail:  # a marker cut to a prefix ("answer<|close")
                held = field.tail
            parsed = read_marked(field.text, held, thinking=kind == "reasoning", cut=self._truncated,
                                 after_tools=bool(self._calls or recovered),
                                 think_closed=kind == "reasoning" and answered) if held else None
            if parsed is not None and not (parsed.tool_calls or parsed.misplaced_tool_calls) and (
                    parsed.reasoning_content or "", parsed.content) == (
                    (field.text + held, "") if kind == "reasoning" else ("", field.text + held)):
                parsed = None  # read as the text it is ("answer<|b" cut): nothing changed, no issue
            from_think = False
            if parsed is None and held and kind == "content" and no_reasoning and field.text == fresh:
                parsed = read_marked(fresh, held, thinking=True, cut=self._truncated,
                                     after_tools=bool(self._calls or recovered))
                from_think = parsed is not None
            if parsed is None:
                if kind == "content" and fresh:
                    out.append(ContentDelta(fresh))
                if text := field.release():
                    out.append(ReasoningDelta(text) if kind == "reasoning" else ContentDelta(text))
                continue
            field.held, field.tail = None, ""
            sent = "" if from_think else field.text
            if from_think:
                field.sent.clear()
            elif kind == "content" and fresh:
                out.append(ContentDelta(fresh))
            reasoning = parsed.reasoning_content or ""
            out += self._add_text("reasoning", reasoning[len(sent):] if kind == "reasoning" else reasoning)
            answer = parsed.content[len(sent):] if kind == "content" else parsed.content
            if kind == "reasoning" and answer and fresh and self._content.sent[-1:] == [fresh]:
                self._content.sent.insert(-1, answer)  # the answer the reasoning held comes before the content's
                self._saw_content = True
                out.append(ContentDelta(answer))  # (the content, held, streams after it)
            else:
                out += self._add_text("content", answer)
            recovered += parsed.tool_calls
            self._misplaced += parsed.misplaced_tool_calls
            self._read.append(_read_issue(kind))
            log.warning("kimik3: K3 markup left in %s read as K3 output: %d call(s)%s", kind, len(parsed.tool_calls),
                        f", {len(parsed.misplaced_tool_calls)} outside a tools section (not run)"
                        if parsed.misplaced_tool_calls else "")
        return out

    def _add_text(self, kind: str, text: str) -> list[Event]:
        if not text:
            return []
        if kind == "reasoning":
            self._saw_reasoning = True
            self._reasoning.sent.append(text)
            return [ReasoningDelta(text)]
        self._saw_content = True
        self._content.sent.append(text)
        return [ContentDelta(text)]

    def _json_calls(self, text: str) -> list[ParsedToolCall] | None:
        """Under ``tool_choice="required"`` with no call: the calls a server sent as JSON content
        (:func:`~._arguments.json_calls`), also when K3 markup it left around them is read away
        (``[{...}]<|close|>response<|sep|>``: a turn issue), else None (the content is the answer)."""
        if self._tool_choice != "required" or self._calls:
            return None
        calls = json_calls(text)
        if calls is not None or not holds_markup(text):
            return calls
        parsed = read_marked("", text, thinking=False)  # the markup read away: only JSON calls left?
        if parsed is None or parsed.tool_calls or parsed.misplaced_tool_calls:
            return None
        if (calls := json_calls(parsed.content)) is not None:
            self._read.append(_read_issue("content"))
        return calls

    def _end_recovered(self, parsed_call: ParsedToolCall) -> list[Event]:
        """A call read from text a server left: run only when its tool was declared."""
        index, self._started = self._started, self._started + 1
        call_id = self._unique(None)
        name, arguments_json = parsed_call.name, parsed_call.arguments_json
        out: list[Event] = [ToolCallStarted(index, call_id, name)]
        reason = parsed_call.error
        if reason is None and name not in self._tools:
            declared = "the request declared no tools" if not self._tools else f"no tool named {name!r} is declared"
            reason = f"the server returned this call as text, and {declared}"
        if reason is not None:
            log.warning("kimik3: a call to %r read from text the server left is not run: %s", name, reason)
            self._failed.append(FailedToolCall(index=index, id=call_id, name=name, arguments=arguments_json,
                                               reason=reason))
            return [*out, ToolCallIncomplete(index, call_id, name)]
        out.append(ToolCallArgumentsDelta(index, call_id, arguments_json))
        out.append(ToolCallDone(index, call_id, name, parsed_call.arguments, arguments_json))
        self._final.append(ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments_json)))
        return out

    def _end_call(self, call: _Call, cut: bool) -> list[Event]:
        out: list[Event] = []
        if not call.id:  # never named
            call.index, self._started = self._started, self._started + 1
            call.id = self._unique(call.server_id)
            out.append(ToolCallStarted(call.index, call.id, call.name))
        text = "".join(call.pieces)
        arguments: dict[str, Any] | None
        if not call.name:
            arguments, reason = None, "the server sent no function name"
        elif not text.strip():
            arguments, reason, text = {}, "", "{}"
        else:
            arguments, reason = decode_arguments(text)
            inner = _loads(text) if call.mode == "string" else None
            if isinstance(inner, str):  # one extra level of JSON encoding: decoded once more
                decoded, why = decode_arguments(escape_controls(inner))
                if decoded is not None:
                    arguments, text = decoded, escape_controls(inner)
                elif inner.lstrip().startswith("{"):  # the object it holds is what is wrong (a key twice)
                    reason = why
        if arguments is None:
            if cut and call.name:  # cut mid-arguments: dropped like the raw parser's cut call
                self._dropped.append(call.name)
            else:
                raw = "".join(call.pieces)
                failed = FailedToolCall(index=call.index, id=call.id, name=call.name, arguments=raw, reason=reason)
                self._failed.append(failed)
                log.warning("kimik3: tool call %s (%r) failed: %s", call.id, call.name, reason)
            out.append(ToolCallIncomplete(call.index, call.id, call.name))
            return out
        if call.sent == 0 or call.mode != "object":
            out.append(ToolCallArgumentsDelta(call.index, call.id, text))
        out.append(ToolCallDone(call.index, call.id, call.name, arguments, text))
        self._final.append(ToolCall(id=call.id, function=FunctionCall(name=call.name, arguments=text)))
        return out

    def completion(self) -> ChatCompletion:
        """The completion (call after :meth:`finish`)."""
        reasoning = self._reasoning.text
        issues = [f"the {kind} holds K3 marker text (<|open|>, <|close|>, <|sep|>, or one spelled a little wrong) "
                  "that could not be read as K3 structure: kept as text"
                  for kind, text in (("reasoning", reasoning), ("answer", self._content.text))
                  if holds_markup(text)]  # left as text: no K3 structure (or prose that quotes a marker)
        message = AssistantMessage(
            content=self._content.text,
            reasoning_content=reasoning if (self.thinking or self._saw_reasoning) else None,
            tool_calls=list(self._final) or None,
        )
        finish: FinishReason = (
            "tool_calls" if self._final else "length" if self._truncated else "stop"
        )
        usage = self._usage or Usage(unknown=True)
        if self._clamped is None:  # once (the counts are changed in place)
            self._clamped = clamp_usage(usage)
            if self._clamped:
                log.warning("kimik3: the server's usage did not add up: %s", "; ".join(self._clamped))
        if usage.total_tokens == 0:
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
        produced = bool(reasoning or message.content or self._final or self._failed or self._dropped)
        if not usage.unknown and (usage.prompt_tokens == 0 or (produced and usage.completion_tokens == 0)):
            usage.unknown = True  # counts that cannot be right: no prompt, or no tokens for an answer
        if usage.unknown:
            log.warning("kimik3: the server reported no usable token usage (%s); usage is marked unknown",
                        "none at all" if self._usage is None else "zeros")
        return ChatCompletion(
            model=self.model,
            choices=[Choice(message=message, finish_reason=finish)],
            usage=usage,
            truncated=self._truncated,
            interrupted=CLOSED_MID_ANSWER if self._truncated and self._finish_reason is None else None,
            dropped_tool_calls=list(self._dropped),
            failed_tool_calls=list(self._failed),
            misplaced_tool_calls=list(self._misplaced),
            issues=[*self._read, *issues, *self._clamped],
        )


def _read_issue(kind: str) -> str:
    """The turn issue of a field (``"reasoning"`` or ``"content"``) whose leaked markup was read."""
    return (f"the {'reasoning' if kind == 'reasoning' else 'answer'} held K3 markup the server left unparsed; read "
            "as K3 structure, so its text changed (markers dropped, text moved between reasoning and answer, calls "
            "read)")


def _loads(text: str) -> Any:
    try:
        return json.loads(text, strict=False)
    except (ValueError, RecursionError):
        return None


def _str(delta: Mapping[str, Any], key: str) -> str:
    value = delta.get(key)
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):  # content as parts (a few gateways): their text
        return "".join(p.get("text", "") for p in value if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    raise APIResponseValidationError(f"'{key}' is not text: {value!r:.200}")
