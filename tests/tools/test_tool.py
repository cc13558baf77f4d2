"""Typed tools: schema from signature + docstring, argument coercion, results, errors."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import sys
import threading
import types
from typing import Annotated, Any, Literal, Optional

import anyio
import pytest
from PIL import Image
from pydantic import BaseModel, Field

import kimik3
from kimik3 import ToolArgumentsError, ToolDefinitionError, ToolError
from kimik3.tools import Tool, ToolContext, ToolResult, tool
from kimik3.types import ImagePart, ImageURL, TextPart, ToolMessage


def sample(
    ctx: ToolContext,
    query: str,
    tags: list[str],
    limit: int = 10,
    ratio: float = 0.5,
    exact: bool = False,
    mode: Literal["fast", "full"] = "fast",
    since: Optional[int] = None,  # noqa: UP045 - Optional on purpose
    note: str | None = None,
) -> str:
    """Search the index.

    Matches are ranked by score.

    Args:
        ctx: the run context (not in the schema).
        query: what to look for; it may span
            two lines.
        tags (list[str]): only documents with all these tags.
        limit: maximum number of results.
        mode: "fast" skips re-ranking.

    Returns:
        One line per match.

    Raises:
        ValueError: never shown to the model.
    """
    return f"{ctx.tool_call_id}|{query}|{tags}|{limit}|{ratio}|{exact}|{mode}|{since}|{note}"


SAMPLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for; it may span two lines."},
        "tags": {
            "type": "array",
            "description": "only documents with all these tags.",
            "items": {"type": "string"},
        },
        "limit": {"type": "integer", "description": "maximum number of results.", "default": 10},
        "ratio": {"type": "number", "default": 0.5},
        "exact": {"type": "boolean", "default": False},
        "mode": {
            "type": "string",
            "description": '"fast" skips re-ranking.',
            "enum": ["fast", "full"],
            "default": "fast",
        },
        "since": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    },
    "required": ["query", "tags"],
    "additionalProperties": False,
}


def test_schema_from_signature_and_docstring() -> None:
    t = Tool.from_function(sample)
    assert t.name == "sample"
    assert t.takes_context is True
    assert t.parameters == SAMPLE_SCHEMA
    assert list(t.parameters) == ["type", "properties", "required", "additionalProperties"]
    assert t.description == "Search the index.\n\nMatches are ranked by score.\n\nReturns:\n    One line per match."


def test_spec_is_a_tool_spec() -> None:
    t = Tool.from_function(sample)
    assert t.spec.model_dump(exclude_none=True) == {
        "type": "function",
        "function": {"name": "sample", "description": t.description, "parameters": SAMPLE_SCHEMA},
    }
    assert kimik3.types.to_tool_specs([t]) == [t.spec]


def test_property_named_title_and_default_survive_cleaning() -> None:
    @tool
    def f(title: str, default: int = 1) -> str:
        """Args:
        title: the title.
        """
        return title

    assert f.parameters == {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "the title."},
            "default": {"type": "integer", "default": 1},
        },
        "required": ["title"],
        "additionalProperties": False,
    }
    assert f.description == ""
    assert f.spec.function.description is None


def test_annotated_field_description_wins_and_constraints_are_kept() -> None:
    @tool
    def f(n: Annotated[int, Field(ge=1, description="from Field")] = 3) -> int:
        """Args:
        n: from the docstring.
        """
        return n

    assert f.parameters["properties"] == {
        "n": {"type": "integer", "description": "from Field", "minimum": 1, "default": 3}
    }
    with pytest.raises(ToolArgumentsError) as e:
        f.validate({"n": 0})
    assert str(e.value) == "n: Input should be greater than or equal to 1 (got 0)"


class Point(BaseModel):
    x: int
    y: int = 0


def test_nested_model_parameter() -> None:
    @tool
    def move(to: Point) -> str:
        return f"{to.x},{to.y}"

    assert move.parameters == {
        "type": "object",
        "properties": {"to": {"$ref": "#/$defs/Point"}},
        "required": ["to"],
        "additionalProperties": False,
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
                "required": ["x"],
            }
        },
    }
    args = move.validate({"to": {"x": "4"}})
    assert args == {"to": Point(x=4, y=0)}
    with pytest.raises(ToolArgumentsError) as e:
        move.validate({"to": {"y": 1}})
    assert str(e.value) == "to.x: missing required argument"


# -- validation ------------------------------------------------------------------------------


@tool
def run_cmd(command: str, timeout: int = 120) -> str:
    """Run a command.

    Args:
        command: the command.
        timeout: seconds.
    """
    return f"{command}:{timeout}"


@pytest.mark.parametrize("value", ["60", 60.0, 60, " 60 "])
def test_int_coercion(value: object) -> None:
    assert run_cmd.validate({"command": "ls", "timeout": value}) == {"command": "ls", "timeout": 60}


def test_validate_fills_defaults_and_accepts_json_text() -> None:
    assert run_cmd.validate('{"command": "ls"}') == {"command": "ls", "timeout": 120}
    assert Tool.from_function(sample).validate({"query": 5, "tags": ["a"], "since": "7"}) == {
        "query": "5",
        "tags": ["a"],
        "limit": 10,
        "ratio": 0.5,
        "exact": False,
        "mode": "fast",
        "since": 7,
        "note": None,
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"command": "ls", "timeout": "abc"},
            "timeout: Input should be a valid integer, unable to parse string as an integer (got 'abc')",
        ),
        (
            {"command": "ls", "timeout": 60.5},
            "timeout: Input should be a valid integer, got a number with a fractional part (got 60.5)",
        ),
        ({"timeout": 1}, "command: missing required argument"),
        (
            {"command": ["ls"], "timeout": None},
            "command: Input should be a valid string (got ['ls']); "
            "timeout: Input should be a valid integer (got None)",
        ),
        (
            {"command": "ls", "cwd": "/", "env": {}},
            "unexpected argument(s): cwd, env (expected: command, timeout)",
        ),
        ('{"command": ', "arguments are not valid JSON: Expecting value: line 1 column 13 (char 12)"),
        ("[1, 2]", "arguments must be a JSON object, got list"),
    ],
)
def test_invalid_arguments(arguments: object, message: str) -> None:
    with pytest.raises(ToolArgumentsError) as e:
        run_cmd.validate(arguments)  # type: ignore[arg-type]
    assert str(e.value) == message


def test_literal_rejected_with_the_allowed_values() -> None:
    with pytest.raises(ToolArgumentsError) as e:
        Tool.from_function(sample).validate({"query": "q", "tags": [], "mode": "slow"})
    assert str(e.value) == "mode: Input should be 'fast' or 'full' (got 'slow')"


def test_empty_arguments() -> None:
    @tool
    def now() -> str:
        return "t"

    assert now.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert now.validate("") == {} and now.validate(None) == {} and now.validate("{}") == {}
    with pytest.raises(ToolArgumentsError, match=r"^unexpected argument\(s\): x \(expected: no arguments\)$"):
        now.validate({"x": 1})


# -- running ---------------------------------------------------------------------------------


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    main = threading.get_ident()

    @tool
    def where() -> bool:
        return threading.get_ident() != main

    assert await where.run({}) == ToolResult(content="true", is_error=False)


async def test_async_tool_and_context() -> None:
    @tool(name="ctx_echo", description="Echo.")
    async def echo(ctx: ToolContext, text: str) -> str:
        return f"{ctx.tool_call_id}:{ctx.deps['user']}:{text}"

    assert echo.name == "ctx_echo" and echo.description == "Echo." and echo.is_async
    assert "ctx" not in echo.parameters["properties"]
    result = await echo.run('{"text": "hi"}', ToolContext(tool_call_id="call_1", deps={"user": "u"}))
    assert result == ToolResult(content="call_1:u:hi")
    assert (await Tool.from_function(sample).run({"query": "q", "tags": ["x"], "limit": "3"})).content == (
        "|q|['x']|3|0.5|False|fast|None|None"
    )


async def test_async_callable_object() -> None:
    class Adder:
        async def __call__(self, a: int, b: int = 1) -> int:
            return a + b

    t = Tool(Adder(), name="add")
    assert t.is_async
    assert t.parameters["required"] == ["a"]
    assert (await t.run({"a": "2"})).content == "3"


async def test_exceptions_become_error_results() -> None:
    @tool
    def boom(x: int) -> str:
        raise ValueError(f"bad x {x}")

    @tool
    async def aboom() -> str:
        raise ToolError("file is locked")

    assert await boom.run({"x": 1}) == ToolResult(content="Error: ValueError: bad x 1", is_error=True)
    assert await aboom.run({}) == ToolResult(content="Error: ToolError: file is locked", is_error=True)
    assert await boom.run({"x": "one"}) == ToolResult(
        content="Error: ToolArgumentsError: x: Input should be a valid integer, unable to parse string "
        "as an integer (got 'one')",
        is_error=True,
    )
    assert await boom.run("not json") == ToolResult(
        content="Error: ToolArgumentsError: arguments are not valid JSON: Expecting value: line 1 column 1 "
        "(char 0)",
        is_error=True,
    )
    assert ToolResult.from_exception(TimeoutError()).content == "Error: TimeoutError"


async def test_cancellation_propagates() -> None:
    state: list[str] = []

    @tool
    async def wait_forever() -> str:
        try:
            await anyio.sleep_forever()
        finally:
            state.append("cleaned up")
        return "unreachable"

    with anyio.move_on_after(0.05) as scope:
        await wait_forever.run({})
    assert scope.cancelled_caught
    assert state == ["cleaned up"]


async def test_sync_tool_over_its_time_limit_is_abandoned() -> None:
    release = threading.Event()
    finished: list[str] = []

    @tool(timeout=0.2)
    def blocker() -> str:
        release.wait()
        finished.append("returned later")
        return "late"

    assert blocker.timeout == 0.2
    assert await blocker.run({}) == ToolResult(
        content="Error: ToolTimeoutError: blocker did not finish within 0.2 s and was abandoned (its thread may "
        "still be running)",
        is_error=True,
    )
    assert finished == []  # the call came back while the thread was still blocked
    threads = [t for t in threading.enumerate() if t.name == "kimik3 tool blocker"]
    assert len(threads) == 1 and threads[0].daemon  # a daemon: never keeps the interpreter alive
    release.set()
    threads[0].join(10)
    assert finished == ["returned later"]


async def test_per_call_time_limit_and_async_tools() -> None:
    @tool
    async def sleeper(s: float) -> str:
        await anyio.sleep(s)
        return "awake"

    assert sleeper.timeout is None
    assert (await sleeper.run({"s": 0})).content == "awake"
    assert await sleeper.run({"s": 30}, timeout=0.1) == ToolResult(
        content="Error: ToolTimeoutError: sleeper did not finish within 0.1 s and was cancelled", is_error=True
    )
    with pytest.raises(ToolDefinitionError, match="tool timeout must be a positive number of seconds, got 0"):
        Tool(sample, timeout=0)


async def test_cancelling_a_blocked_sync_tool_returns_at_once() -> None:
    release = threading.Event()

    @tool
    def blocked() -> str:
        release.wait()
        return "x"

    with anyio.move_on_after(0.1) as scope:
        await blocked.run({})
    assert scope.cancelled_caught  # came back although the function had not returned
    assert not release.is_set()
    release.set()


async def test_sync_tool_sees_context_variables_and_raises_through() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    @tool
    def read_var() -> str:
        return var.get()

    var.set("from the caller")
    assert (await read_var.run({})).content == "from the caller"


def test_dotted_names() -> None:
    t = Tool(run_cmd.function, name="my.namespace.do_thing")
    assert t.name == "my.namespace.do_thing" and t.spec.function.name == "my.namespace.do_thing"
    with pytest.raises(ToolDefinitionError, match="invalid tool name 'a/b'"):
        Tool(run_cmd.function, name="a/b")


class Edit(BaseModel):
    old: str
    new: str


async def test_array_and_object_arguments_sent_as_json_text() -> None:
    @tool
    def apply(edits: list[Edit], options: dict[str, int] | None = None, label: str = "") -> str:
        return f"{[(e.old, e.new) for e in edits]} {options} {label!r}"

    result = await apply.run({"edits": '[{"old":"x","new":"y"}]', "options": '{"n": 2}', "label": "[1]"})
    assert result.content == "[('x', 'y')] {'n': 2} '[1]'"  # a string parameter is never decoded
    # decoded once only: JSON text of JSON text stays a string, and is rejected as such
    twice = await apply.run({"edits": '"[]"'})
    assert twice.is_error and twice.content.startswith(  # type: ignore[union-attr]
        "Error: ToolArgumentsError: edits: Input should be a valid list (got '\"[]\"')"
    )
    assert (await apply.run('{"edits": "[{\\"old\\": \\"a\\", \\"new\\": \\"b\\"}]"}')).content == (
        "[('a', 'b')] None ''"
    )
    bad = await apply.run({"edits": "[not json"})
    assert bad.content == "Error: ToolArgumentsError: edits: Input should be a valid list (got '[not json')"


async def test_booleans_are_not_numbers() -> None:
    @tool
    def count(n: int, ratio: float = 0.5, maybe: int | None = None, flag: bool = False) -> str:
        return f"{n} {ratio} {maybe} {flag}"

    assert await count.run({"n": True}) == ToolResult(
        content="Error: ToolArgumentsError: n: Input should be a number, not a boolean (got True)", is_error=True
    )
    assert (await count.run({"n": 1, "ratio": False})).content == (
        "Error: ToolArgumentsError: ratio: Input should be a number, not a boolean (got False)"
    )
    assert (await count.run({"n": 1, "maybe": True})).is_error
    assert (await count.run('{"n": 2, "ratio": 1, "flag": true}')).content == "2 1.0 None True"
    assert (await count.run({"n": "3"})).content == "3 0.5 None False"  # lax coercion otherwise unchanged


class Mark(BaseModel):
    x: int
    label: str | bool = ""


async def test_booleans_are_not_numbers_at_any_depth() -> None:
    @tool
    def plot(points: list[Mark], pairs: list[tuple[int, int]] | None = None, weights: dict[str, float] | None = None) -> str:
        return f"{[(p.x, p.label) for p in points]} {pairs} {weights}"

    assert (await plot.run({"points": [{"x": 1, "label": True}]})).content == "[(1, True)] None None"
    assert (await plot.run({"points": [{"x": 1}, {"x": True}]})).content == (
        "Error: ToolArgumentsError: points.1.x: Input should be a number, not a boolean (got [{'x': 1}, {'x': True}])"
    )
    assert (await plot.run({"points": [], "pairs": [[1, 2], [3, False]]})).content == (
        "Error: ToolArgumentsError: pairs.1.1: Input should be a number, not a boolean (got [[1, 2], [3, False]])"
    )
    assert (await plot.run({"points": '[{"x": true}]'})).content == (  # JSON text: checked after its decode
        "Error: ToolArgumentsError: points.0.x: Input should be a number, not a boolean (got [{'x': True}])"
    )
    assert (await plot.run({"points": [], "weights": {"a": True}})).content == (
        "Error: ToolArgumentsError: weights.a: Input should be a number, not a boolean (got {'a': True})"
    )
    assert (await plot.run({"points": [{"x": 2}], "pairs": [[1, 2]], "weights": {"a": 0.5}})).content == (
        "[(2, '')] [(1, 2)] {'a': 0.5}"
    )


def test_tool_results_are_always_valid_utf8() -> None:
    name = "caf\udce9.txt"  # os.listdir's name for the bytes b"caf\xe9.txt"
    result = ToolResult.from_value(f"found {name}\nlone \ud800 surrogate")
    assert result.content == "found caf\\xe9.txt\nlone \\ud800 surrogate"
    assert result.text.encode("utf-8")
    parts = ToolResult(content=[TextPart(text=name)])
    assert parts.text == "caf\\xe9.txt"
    assert ToolResult.from_value("naïve ✓").content == "naïve ✓"


def test_direct_call_bypasses_validation() -> None:
    assert run_cmd("ls", timeout=5) == "ls:5"


# -- definition errors -----------------------------------------------------------------------


def _varargs(*names: str) -> str:
    return ""


def _kwargs(**options: str) -> str:
    return ""


def _unannotated(x, y: int) -> str:  # type: ignore[no-untyped-def]
    return ""


def _late_ctx(x: int, ctx: ToolContext) -> str:
    return ""


def _posonly(x: int, /) -> str:
    return ""


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_varargs, "tool '_varargs': *args / **kwargs are not supported (names)"),
        (_kwargs, "tool '_kwargs': *args / **kwargs are not supported (options)"),
        (_unannotated, "tool '_unannotated': parameter 'x' has no type annotation"),
        (_late_ctx, "tool '_late_ctx': the ToolContext parameter 'ctx' must come first"),
        (_posonly, "tool '_posonly': positional-only parameter 'x'"),
        (lambda: 1, "invalid tool name '<lambda>': use 1-64 letters, digits, '_', '.' or '-' (pass name=...)"),
    ],
)
def test_definition_errors(fn: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError) as e:
        tool(fn)
    assert str(e.value) == message


class Opaque:
    pass


def test_unsupported_parameter_type() -> None:
    def f(x: Opaque) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match=r"^tool 'f': unsupported parameter type: "):
        tool(f)


def test_local_class_annotation_is_explained() -> None:
    class Local:
        pass

    def g(x: Local) -> str:
        return ""

    with pytest.raises(ToolDefinitionError) as e:
        tool(g)
    assert str(e.value) == (
        "cannot read the signature of tool 'g': name 'Local' is not defined (the types of its "
        "annotations must be importable from its module; local classes are not)"
    )


# -- results ---------------------------------------------------------------------------------


class _Prepared:
    """Stands for kimik3.media.PreparedImage (duck-typed through data_url())."""

    def data_url(self) -> str:
        return "data:image/jpeg;base64,AAAA"


@dataclasses.dataclass
class _Point:
    x: int
    label: str


class _Model(BaseModel):
    name: str
    score: float


IMG = ImagePart(image_url=ImageURL(url="data:image/jpeg;base64,AAAA"))


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("plain text", "plain text"),
        (None, ""),
        (60, "60"),
        (0.25, "0.25"),
        (True, "true"),
        ({"b": 1, "a": ["é", None]}, '{"b":1,"a":["é",null]}'),
        ([1, "two"], '[1,"two"]'),
        ((1, 2), "[1,2]"),
        (_Model(name="ünï", score=1.5), '{"name":"ünï","score":1.5}'),
        (_Point(x=1, label="p"), '{"x":1,"label":"p"}'),
        (TextPart(text="t"), "t"),
        (_Prepared(), [IMG]),
        (IMG, [IMG]),
        (
            ["caption", _Prepared(), {"k": 1}, None, TextPart(text="end")],
            [TextPart(text="caption"), IMG, TextPart(text='{"k":1}'), TextPart(text="end")],
        ),
    ],
)
def test_from_value(value: object, content: object) -> None:
    assert ToolResult.from_value(value) == ToolResult(content=content)  # type: ignore[arg-type]


def test_result_passthrough_text_and_message() -> None:
    r = ToolResult(content="x", is_error=True)
    assert ToolResult.from_value(r) is r
    mixed = ToolResult.from_value(["a", _Prepared(), "b"])
    assert mixed.text == "a\nb"
    assert ToolResult(content="only").text == "only"
    msg = mixed.to_message("call_9", "shot")
    assert isinstance(msg, ToolMessage)
    assert kimik3.types.dump_message(msg) == {
        "role": "tool",
        "content": [
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
            {"type": "text", "text": "b"},
        ],
        "tool_call_id": "call_9",
        "name": "shot",
    }


def _pil() -> Image.Image:
    img = Image.new("RGB", (4, 3), (10, 200, 30))
    img.putpixel((0, 0), (255, 0, 0))
    return img


def test_pil_image_goes_through_media_prepare_image(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Image.Image] = []

    class _Out:
        def data_url(self) -> str:
            return "data:image/png;base64,PREPARED"

    def prepare_image(image: Image.Image) -> _Out:
        seen.append(image)
        return _Out()

    fake = types.ModuleType("kimik3.media")
    fake.prepare_image = prepare_image  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kimik3.media", fake)
    img = _pil()
    result = ToolResult.from_value(img)
    assert result.content == [ImagePart(image_url=ImageURL(url="data:image/png;base64,PREPARED"))]
    assert seen == [img]


def test_pil_image_fallback_png_without_media(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kimik3.media", types.ModuleType("kimik3.media"))
    result = ToolResult.from_value(_pil())
    assert isinstance(result.content, list) and isinstance(result.content[0], ImagePart)
    url = result.content[0].image_url.url
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    decoded = Image.open(io.BytesIO(base64.b64decode(url[len(prefix) :])))
    assert decoded.format == "PNG" and decoded.size == (4, 3)
    assert decoded.convert("RGB").getpixel((0, 0)) == (255, 0, 0)
    assert decoded.convert("RGB").getpixel((3, 2)) == (10, 200, 30)


def test_pil_image_with_the_real_media_package() -> None:
    media = pytest.importorskip("kimik3.media")
    if not hasattr(media, "prepare_image"):
        pytest.skip("kimik3.media.prepare_image is not there yet")
    result = ToolResult.from_value(Image.new("RGB", (64, 48), (0, 0, 255)))
    assert isinstance(result.content, list) and isinstance(result.content[0], ImagePart)
    assert result.content[0].image_url.url.startswith("data:image/")


# -- cancellation (issue 14: a tool's own CancelledError is its error) --


async def test_a_tools_own_cancelled_error_is_its_error_result_a_callers_cancellation_propagates() -> None:
    @tool
    async def raises() -> str:
        """Raises CancelledError itself."""
        raise asyncio.CancelledError("bug")

    @tool
    def raises_in_thread() -> str:
        """Raises CancelledError in its worker thread."""
        raise asyncio.CancelledError()

    @tool
    async def sleeper() -> str:
        """Sleeps long."""
        await anyio.sleep(60)
        return "woke"

    assert (await raises.run({})).text == "Error: CancelledError: bug (raised by the code itself: nothing cancelled it)"
    assert (await raises_in_thread.run({})).text == "Error: CancelledError (raised by the code itself: nothing cancelled it)"
    reached: list[str] = []
    with anyio.move_on_after(0.05) as scope:  # the caller is cancelled: that propagates
        await sleeper.run({})
        reached.append("after")
    assert scope.cancelled_caught and reached == []


@tool
def _takes_lists(xs: list[int], opts: dict[str, int] | None = None) -> str:
    """Takes a list and a mapping."""
    return repr((xs, opts))


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"xs": "[1e999]"}, "xs: its JSON text is beyond the JSON limits: the number 1e999 is out of range (it would be inf)"),
        ({"xs": "[" + "9" * 700 + "]"}, "xs: its JSON text is beyond the JSON limits: an integer has more than 640 digits"),
        ({"xs": "[" * 200 + "]" * 200}, "xs: its JSON text is beyond the JSON limits: nested deeper than 128 arrays/objects"),
        ({"xs": [1], "opts": '{"a": 1e999}'}, "opts: its JSON text is beyond the JSON limits: the number 1e999 is out of range"),
    ],
)
async def test_json_text_argument_beyond_limits_names_the_limit(arguments: dict[str, Any], reason: str) -> None:
    result = await _takes_lists.run(arguments)
    assert result.is_error
    assert result.content.startswith("Error: ToolArgumentsError: " + reason)
