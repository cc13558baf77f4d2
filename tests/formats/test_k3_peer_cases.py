"""The K3 test cases of the peers, as kimik3's own (issue 27, item 9): vLLM's kimi_k3 tool and
reasoning parser suites, SGLang's kimik3 detector suite and Moonshot's Kimi Vendor Verifier
(``tests/k3_features``), restated as table rows in our own words: the input, what kimik3 gives
(Moonshot's reference behaviour), and the source (``repository@commit path::test``).

Where a peer expects something else, the row says so (``departure``): the peer departs from the
reference there, or the case is a serving-layer decision kimik3 takes elsewhere. The three known
departures of the peers from Moonshot's reference are pinned at the end.

Output cases run through ``parse()`` and ``StreamParser`` (the peer's own chunks when it streamed,
and chunk sizes 1, 3, 7); request cases through :func:`~kimik3.formats.k3.check_request` (run by
every ``ChatRequest``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from kimik3 import InvalidRequestError, MessageError
from kimik3.engines import ChatRequest
from kimik3.formats.k3 import CLOSE, END_OF_MSG, OPEN, SEP, StreamParser, default_tokenizer, parse, render
from tests.data_paths import load_json

THINK_OPEN, THINK_CLOSE = f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}"
RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}", f"{CLOSE}message{SEP}"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"

VLLM_TOOLS = "vllm-project/vllm@0fdcde6ade27 tests/tool_use/test_kimi_k3_tool_parser.py"
VLLM_STREAM = "vllm-project/vllm@b63542617830 tests/tool_parsers/test_kimi_k3_tool_parser.py"
VLLM_REASONING = "vllm-project/vllm@0ad0a4635e6f tests/reasoning/test_kimi_k3_reasoning_parser.py"
SGL = "sgl-project/sglang@0396a0526bdc test/registered/function_call/test_kimik3_detector.py"
SGL_VALUES = "Infrawaves/sglang@489e3a26daa4 test/registered/function_call/test_kimik3_detector.py"
SGL_STREAM = "modal-projects/sglang@58809f2ce9d4 test/registered/function_call/test_kimik3_detector.py"
SGL_REASONING = "modal-labs/sglang@cc7b258e4883 test/registered/function_call/test_kimik3_detector.py"
VERIFIER = "MoonshotAI/Kimi-Vendor-Verifier@3dad65a760a8 tests/k3_features"


def arg(key: str, kind: str, value: str) -> str:
    return f'{OPEN}argument key="{key}" type="{kind}"{SEP}{value}{CLOSE}argument{SEP}'


def call(tool: str, index: int, *args: str) -> str:
    return f'{OPEN}call tool="{tool}" index="{index}"{SEP}{"".join(args)}{CLOSE}call{SEP}'


def response(text: str) -> str:
    return RESPONSE_OPEN + text + RESPONSE_CLOSE


def tools(*calls: str) -> str:
    return TOOLS_OPEN + "".join(calls) + TOOLS_CLOSE


X1 = call("calc", 1, arg("x", "number", "1"))
LEAKED = tools(call("read_agent", 1, arg("id", "string", "worker_1"))) + MESSAGE_CLOSE
CODE = 'print("雪")\\path\n\r\t\b\f\x00\x1f<|close|>argumenX &quot;'


@dataclass
class Out:
    """One peer case on K3 output: the text (or the chunks the peer streamed) and kimik3's parse."""

    source: str
    text: str | list[str]
    thinking: bool = True
    reasoning: str | None = ""
    content: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    departure: str = ""  # where the peer expects otherwise, and why kimik3 does not


OUTPUTS = [
    # -- vLLM: tool parser (tests/tool_use) -------------------------------------------------------
    Out(f"{VLLM_TOOLS}::test_extract_tool_calls_with_response_and_typed_arguments",
        response("answer") + tools(call("calc", 1, arg("x", "number", "1"), arg("flag", "boolean", "true"),
                                        arg("text", "string", "raw"))),
        content="answer", calls=[("calc", {"x": 1, "flag": True, "text": "raw"})]),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_preserves_tool_calls_after_reasoning",
        THINK_OPEN + "step" + THINK_CLOSE + response("answer") + tools(X1),
        reasoning="step", content="answer", calls=[("calc", {"x": 1})]),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_required_tool_choice_uses_xtml_parser (and _named_, "
        "_message_level_tools_required)",
        THINK_OPEN + "step" + THINK_CLOSE + response("") + tools(X1),
        reasoning="step", calls=[("calc", {"x": 1})]),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_auto_no_call_strips_consumed_response_prefix",
        "answer" + RESPONSE_CLOSE, thinking=False, reasoning=None, content="answer"),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_required_call_strips_consumed_response_prefix "
        "(and test_responses_*_tool_choice_uses_xtml_parser)",
        RESPONSE_CLOSE + tools(X1), thinking=False, reasoning=None, calls=[("calc", {"x": 1})]),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_truncated_tools_do_not_leak_xtml",
        RESPONSE_CLOSE + TOOLS_OPEN + f'{OPEN}call tool="calc" index="1"', thinking=False, reasoning=None),
    Out(f"{VLLM_TOOLS}::test_extract_tool_calls_unescapes_attributes",
        tools(call("a&amp;b&quot;c", 1, arg("k&amp;q", "string", "v"))), calls=[('a&b"c', {"k&q": "v"})]),
    Out(f"{VLLM_TOOLS}::test_extract_tool_calls_allows_less_than_in_attributes",
        tools(call("calc<beta", 1, arg("foo<bar", "string", "raw"))), calls=[("calc<beta", {"foo<bar": "raw"})]),
    Out(f"{VLLM_TOOLS}::test_extract_content_from_whitespace_degraded_markers",
        f"{OPEN} response {SEP}answer{CLOSE} response {SEP}", content="answer"),
    Out(f"{VLLM_TOOLS}::test_streaming_split_markers_do_not_leak",
        [OPEN, "response", f"{SEP}Hi", OPEN, "tools", SEP, f'{OPEN}call tool="calc" index="1"{SEP}',
         arg("x", "number", "1"), f"{CLOSE}call", SEP],
        content="Hi", calls=[("calc", {"x": 1})]),
    Out(f"{VLLM_TOOLS}::test_streaming_consumed_response_prefix_no_call_keeps_content",
        ["O", "K", CLOSE, f"response{SEP}"], thinking=False, reasoning=None, content="OK"),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_tool_choice_none_strips_xtml_and_suppresses_calls "
        "(and _message_level_tools_none_strips_channels)",
        [OPEN, "response", f"{SEP}answer", RESPONSE_CLOSE, tools(X1)], thinking=False, reasoning=None, content="answer",
        calls=[("calc", {"x": 1})],
        departure="vLLM drops the call because the request said tool_choice='none': a serving decision on the "
                  "request, not the output format. kimik3's parser reports what the model wrote; its agent only "
                  "asks tool_choice='none' for a tool-free summary turn, whose calls it never runs."),
    Out(f"{VLLM_TOOLS}::test_delegating_parser_message_level_tools_auto",
        THINK_OPEN + "step" + THINK_CLOSE + response("answer") + tools(X1),
        reasoning="step", content="answer", calls=[("calc", {"x": 1})]),
    # -- vLLM: tool parser streaming (tests/tool_parsers) ------------------------------------------
    Out(f"{VLLM_STREAM}::test_streaming_content_stops_at_message_close (and _holds_split_message_close)",
        "Hello" + MESSAGE_CLOSE, thinking=False, reasoning=None, content="Hello"),
    # -- vLLM: reasoning parser --------------------------------------------------------------------
    Out(f"{VLLM_REASONING}::test_extract_reasoning_with_xtml_tags (and test_delegating_parser_strips_response_"
        "wrapper_without_tool_parser)",
        THINK_OPEN + "step" + THINK_CLOSE + RESPONSE_OPEN + "answer", reasoning="step", content="answer"),
    Out(f"{VLLM_REASONING}::test_extract_reasoning_with_generation_prefix_consumed",
        "step" + THINK_CLOSE + RESPONSE_OPEN + "answer", reasoning="step", content="answer"),
    Out(f"{VLLM_REASONING}::test_extract_reasoning_truncated_before_close_marker (and test_streaming_truncated_"
        "before_close_marker)",
        "unfinished reasoning", reasoning="unfinished reasoning"),
    Out(f"{VLLM_REASONING}::test_extract_markerless_output_with_thinking_disabled",
        "answer", thinking=False, reasoning=None, content="answer"),
    Out(f"{VLLM_REASONING}::test_streaming_split_open_marker_is_held_back",
        [OPEN, "think", f"{SEP}step"], reasoning="step"),
    Out(f"{VLLM_REASONING}::test_streaming_split_close_marker_hands_content_downstream",
        [THINK_OPEN + "step", CLOSE, f"think{SEP}{RESPONSE_OPEN}answer"], reasoning="step", content="answer"),
    Out(f"{VLLM_REASONING}::test_thinking_disabled_streams_content",
        RESPONSE_OPEN + "answer", thinking=False, reasoning=None, content="answer"),
    Out(f"{VLLM_REASONING}::test_delegating_parser_thinking_false_streams_response_content",
        ["OK", CLOSE, f"response{SEP}"], thinking=False, reasoning=None, content="OK"),
    # -- SGLang: detector ------------------------------------------------------------------------
    Out(f"{SGL}::test_detect_and_parse_single_call",
        response("Let me run it.") + tools(call("python", 1, arg("code", "string", "print(1)"),
                                                arg("opts", "object", '{"a": 1}'))),
        content="Let me run it.", calls=[("python", {"code": "print(1)", "opts": {"a": 1}})]),
    Out(f"{SGL}::test_detect_and_parse_no_tools_channel", response("hi there") + MESSAGE_CLOSE, content="hi there"),
    Out(f"{SGL}::test_detect_and_parse_multiple_calls (and test_streaming_two_calls)",
        tools(call("python", 1, arg("code", "string", "a")), call("python", 2, arg("code", "string", "b"))),
        calls=[("python", {"code": "a"}), ("python", {"code": "b"})]),
    Out(f"{SGL}::test_detect_and_parse_unclosed_tools_section",
        TOOLS_OPEN + call("python", 1, arg("code", "string", "x")), calls=[("python", {"code": "x"})]),
    Out(f"{SGL}::test_attr_unescaping_and_raw_string_args",
        tools(call("a&amp;b", 1, arg("q", "string", "say &quot;hi&quot;"))), calls=[("a&b", {"q": "say &quot;hi&quot;"})]),
    Out(f"{SGL}::test_non_string_arg_json_decoding",
        tools(call("python", 1, arg("n", "number", "42"), arg("flag", "boolean", "true"),
                   arg("bad", "object", "{not json"))),
        calls=[("python", {"n": 42, "flag": True, "bad": "{not json"})]),
    Out(f"{SGL}::test_streaming_split_markers",
        response("Hello!") + tools(call("python", 1, arg("code", "string", "print(2)"))),
        content="Hello!", calls=[("python", {"code": "print(2)"})]),
    Out(f"{SGL}::test_streaming_plain_text_only", ["just a ", "plain ", "reply"], thinking=False, reasoning=None,
        content="just a plain reply"),
    Out(f"{SGL}::test_stream_end_reports_truncated_tools_section",
        TOOLS_OPEN + f'{OPEN}call tool="python" index="1"{SEP}'),
    Out(f"{SGL}::test_stream_end_releases_held_back_text", ["all done", "<"], thinking=False, reasoning=None,
        content="all done<"),
    Out(f"{SGL}::test_stream_end_drops_truncated_marker", ["all done", OPEN], thinking=False, reasoning=None,
        content="all done"),
    Out(f"{SGL}::test_truncated_markers_leave_no_text[<|open|>tools]", OPEN + "tools", thinking=False, reasoning=None),
    Out(f"{SGL}::test_truncated_markers_leave_no_text[<|close|>response]", CLOSE + "response", thinking=False,
        reasoning=None),
    Out(f"{SGL}::test_truncated_markers_leave_no_text[<|]", "<|", thinking=False, reasoning=None, content="<|",
        departure="SGLang strips a lone '<|' at the end, though its own stream keeps a trailing '<'. K3's markers "
                  "are single tokens: a text ending in '<|' was written as text (issue 27, item 3)."),
    Out(f"{SGL}::test_truncated_markers_leave_no_text[<|open|>response<|sep|><|close|]", RESPONSE_OPEN + "<|close|",
        thinking=False, reasoning=None, content="<|close|",
        departure="as the row above: SGLang strips a partial marker at the end; it is text."),
    Out(f"{SGL}::test_unparsed_tools_section_dropped_with_reply_kept", response("on it") + LEAKED,
        content="on it", calls=[("read_agent", {"id": "worker_1"})],
        departure="SGLang strips the section because no tool parser was active for the request: a serving "
                  "decision. kimik3's parser reads the call; in chat mode a call read from server text runs only "
                  "when its tool was declared (a failed call otherwise)."),
    Out(f"{SGL}::test_narration_before_truncated_marker_survives",
        "I am delegating the docs subagent." + CLOSE + "response", thinking=False, reasoning=None,
        content="I am delegating the docs subagent."),
    Out(f"{SGL}::test_think_channel_content_is_dropped_not_unwrapped",
        THINK_OPEN + "secret" + THINK_CLOSE + "visible", thinking=False, reasoning="secret", content="visible"),
    Out(f"{SGL}::test_think_channel_content_is_dropped_not_unwrapped (cut)", THINK_OPEN + "cut off mid-thought",
        thinking=False, reasoning="cut off mid-thought"),
    Out(f"{SGL}::test_response_channel_kept_inline_when_reasoning_is_not_separated (separated)",
        "trace" + THINK_CLOSE + response("answer"), reasoning="trace", content="answer"),
    Out(f"{SGL}::test_think_close_without_open_drops_reasoning", "deliberating" + THINK_CLOSE + "visible",
        reasoning="deliberating", content="visible"),
    Out(f"{SGL}::test_think_close_without_open_drops_reasoning (leaked tools)", "deliberating" + THINK_CLOSE + LEAKED,
        reasoning="deliberating", calls=[("read_agent", {"id": "worker_1"})]),
    Out(f"{SGL}::test_quoted_call_token_without_attributes_survives", "calls open with <|open|>call, then attributes",
        thinking=False, reasoning=None, content="calls open with ",
        departure="SGLang keeps ', then attributes'. In raw output an open marker is a token: what follows it is a "
                  "tag header, and one the output ends inside is dropped (a cut mid-tag). Chat mode keeps such "
                  "server text intact (tests/engines/test_chat_transcripts.py)."),
    Out(f"{SGL}::test_markers_only_strip_keeps_reasoning_text", "weighing options" + THINK_CLOSE,
        reasoning="weighing options"),
    Out(f"{SGL}::test_markers_only_strip_keeps_reasoning_text (partial header)", "weighing options<|open|>argu",
        reasoning="weighing options"),
    Out(f"{SGL}::test_markers_only_strip_keeps_reasoning_text (partial call)", 'weighing <|open|>call tool="rea',
        reasoning="weighing "),
    *(Out(f"{SGL}::test_plain_text_is_untouched[{t!r}]", t, thinking=False, reasoning=None, content=t)
      for t in ("", "hello world", "a < b and c |> d", "is 3 < 4? yes <")),
    Out(f"{SGL}::test_parser_strips_when_detection_misses", "done<|open|>tool", thinking=False, reasoning=None,
        content="done"),
    Out(f"{SGL}::test_syntax_only_text_still_yields_a_message", RESPONSE_OPEN + "<|close|", thinking=False,
        reasoning=None, content="<|close|", departure="SGLang strips a partial marker at the end; it is text."),
    # -- SGLang: values (Infrawaves fork) -------------------------------------------------------------
    Out(f"{SGL_VALUES}::test_streaming_split_markers",
        response("Hello!") + tools(call("python", 27, arg("code", "string", CODE), arg("empty", "string", ""),
                                        arg("literal", "string", "null"), arg("q&amp;&quot;", "string", "raw &amp;"),
                                        arg("number", "number", "1e2"), arg("null", "null", "null"),
                                        arg("flag", "boolean", "false"), arg("opts", "object", '{"a":[true,null,"x"]}'),
                                        arg("array", "array", '[1,"two"]'), arg("bad", "number", "1e"))),
        content="Hello!", calls=[("python", {"code": CODE, "empty": "", "literal": "null", 'q&"': "raw &amp;",
                                             "number": 100.0, "null": None, "flag": False,
                                             "opts": {"a": [True, None, "x"]}, "array": [1, "two"], "bad": "1e"})]),
    Out(f"{SGL_VALUES}::test_streaming_multiple_calls",
        tools(call("python", 27, arg("code", "string", "a")), call("python", 28, arg("code", "string", "b")),
              call("finish", 29)),
        calls=[("python", {"code": "a"}), ("python", {"code": "b"}), ("finish", {})]),
    *(Out(f"{SGL_VALUES}::test_streaming_non_string_waits_for_complete_value[{kind}]",
          [TOOLS_OPEN + f'{OPEN}call tool="python" index="1"{SEP}' + f'{OPEN}argument key="value" type="{kind}"{SEP}', *parts,
           f"{CLOSE}argument{SEP}{CLOSE}call{SEP}"], calls=[("python", {"value": value})])
      for kind, parts, value in (("number", ["1", "e", "2"], 100.0), ("null", ["n", "ul", "l"], None),
                                 ("boolean", ["tr", "ue"], True), ("array", ["[1", ",2]"], [1, 2]),
                                 ("object", ['{"a":', "false}"], {"a": False}), ("number", ["1", "e"], "1e"))),
    Out(f"{SGL_VALUES}::test_stream_end_reports_truncated_tools_section[partial argument]",
        TOOLS_OPEN + f'{OPEN}call tool="python" index="1"{SEP}' + f'{OPEN}argument key="code" type="string"{SEP}partial<|cl'),
    # -- SGLang: stream = parse (modal-projects fork) ------------------------------------------------
    Out(f"{SGL_STREAM}::test_streaming_matches_detect_and_parse[mixed_types]",
        response("Running.") + tools(call("python", 1, arg("code", "string", 'print("a\\tb")\n\tx = {"k": 1}'),
                                          arg("n", "number", "42"), arg("flag", "boolean", "true"),
                                          arg("opts", "object", '{"a": [1, 2], "b": null}'),
                                          arg("bad", "object", "{not json"))),
        content="Running.", calls=[("python", {"code": 'print("a\\tb")\n\tx = {"k": 1}', "n": 42, "flag": True,
                                               "opts": {"a": [1, 2], "b": None}, "bad": "{not json"})]),
    Out(f"{SGL_STREAM}::test_streaming_matches_detect_and_parse[unicode_and_escaped_attrs]",
        tools(call("a&amp;b", 1, arg("q&quot;k", "string", "héllo 世界 🚀 \u0001 </ &quot;"))),
        calls=[("a&b", {'q"k': "héllo 世界 🚀 \u0001 </ &quot;"})]),
    Out(f"{SGL_STREAM}::test_streaming_matches_detect_and_parse[parallel_and_empty]",
        TOOLS_OPEN + "\n" + call("python", 1, arg("code", "string", "a")) + "\n" + call("noop", 2)
        + call("python", 3, arg("code", "string", ""), arg("x", "integer", "-1")) + TOOLS_CLOSE + MESSAGE_CLOSE,
        calls=[("python", {"code": "a"}), ("noop", {}), ("python", {"code": "", "x": -1})]),
    Out(f"{SGL_STREAM}::test_streaming_matches_detect_and_parse[string_contains_marker_prefixes]",
        tools(call("python", 1, arg("code", "string", "<|close|>arg <| x <|sep"))),
        calls=[("python", {"code": "<|close|>arg <| x <|sep"})]),
    Out(f"{SGL_STREAM}::test_streaming_matches_detect_and_parse[nameless_call_skipped]",
        TOOLS_OPEN + f'{OPEN}call index="1"{SEP}{CLOSE}call{SEP}' + call("python", 2, arg("code", "string", "z")) + TOOLS_CLOSE,
        calls=[("", {}), ("python", {"code": "z"})],
        departure="SGLang (and vLLM) drop a call without a tool name silently. kimik3 keeps it as the model wrote "
                  "it: the agent answers it 'unknown tool' and the model can correct itself (never silent)."),
    Out(f"{SGL_STREAM}::test_streaming_matches_detect_and_parse[unclosed_tools_section]",
        TOOLS_OPEN + call("python", 1, arg("code", "string", "x")), calls=[("python", {"code": "x"})]),
    Out(f"{SGL_STREAM}::test_stream_end_keeps_truncated_call_arguments",
        TOOLS_OPEN + f'{OPEN}call tool="python" index="1"{SEP}' + f'{OPEN}argument key="code" type="string"{SEP}print(1'
        + "<|close|>argu"),
    Out(f"{SGL_STREAM}::test_streaming_emits_name_and_string_args_before_call_closes",
        [TOOLS_OPEN + f'{OPEN}call tool="python" index="1"{SEP}', f'{OPEN}argument key="code" type="string"{SEP}print(',
         '"hi")\n<|close|>', f"argument{SEP}{CLOSE}call{SEP}"], calls=[("python", {"code": 'print("hi")\n'})]),
    Out(f"{SGL_STREAM}::test_streaming_holds_non_string_args_until_closed",
        [TOOLS_OPEN + f'{OPEN}call tool="python" index="1"{SEP}', f'{OPEN}argument key="opts" type="object"{SEP}{{"a": [1,',
         f" 2]}}{CLOSE}argument{SEP}", f"{CLOSE}call{SEP}"], calls=[("python", {"opts": {"a": [1, 2]}})]),
    # -- SGLang: reasoning detector (modal-labs fork) ---------------------------------------------
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_full_markers",
        THINK_OPEN + "deep thought" + THINK_CLOSE + response("the answer") + MESSAGE_CLOSE,
        reasoning="deep thought", content="the answer"),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_consumed_prefix",
        "thinking..." + THINK_CLOSE + response("done"), reasoning="thinking...", content="done"),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_thinking_disabled",
        response("plain reply") + MESSAGE_CLOSE, thinking=False, reasoning=None, content="plain reply"),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_tools_channel_passthrough",
        "t" + THINK_CLOSE + response("r") + tools(call("python", 1, arg("code", "string", "1"))),
        reasoning="t", content="r", calls=[("python", {"code": "1"})]),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_streaming_split_markers",
        ["I am thinking<|close|>thi", f"nk{SEP}", "<|open|>respon", f"se{SEP}Ans", "wer here", RESPONSE_CLOSE, MESSAGE_CLOSE],
        reasoning="I am thinking", content="Answer here"),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_streaming_in_band_open_marker",
        THINK_OPEN + "abc" + THINK_CLOSE + response("xyz") + MESSAGE_CLOSE, thinking=False, reasoning="abc",
        content="xyz"),
    *(Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_truncated_reasoning_partial_marker"
          f"[{tail}]", THINK_OPEN + "still going" + tail, reasoning="still going")
      for tail in ("<|close|>think", "<|open|>", "<|open|>think")),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_reasoning_before_tools_preserved_unchanged",
        THINK_OPEN + "reason<|close|>" + TOOLS_OPEN + "call", reasoning="reason",
        departure="SGLang keeps '<|close|>' in the reasoning (a marker byte in reasoning_content). A header "
                  "interrupted by another marker is dropped (spec §3: no marker byte in reasoning or content)."),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_partial_marker_after_think_close",
        THINK_OPEN + "still going" + THINK_CLOSE + RESPONSE_OPEN + "hi<|close|>response", reasoning="still going",
        content="hi"),
    Out(f"{SGL_REASONING}::TestKimiK3ReasoningDetector::test_non_stream_tools_boundary_chain",
        THINK_CLOSE + tools(call("get_weather", 1, arg("city", "string", "Paris"))),
        calls=[("get_weather", {"city": "Paris"})]),
    *(Out(f"{SGL_REASONING}::TestKimiK3FuncDetector::test_non_stream_dangling_partial_marker[{tail}]",
          RESPONSE_OPEN + "Here is the answer." + tail, thinking=False, reasoning=None, content="Here is the answer.")
      for tail in ("<|close|>", "<|close|>response", "<|open|>")),
    Out(f"{SGL_REASONING}::TestKimiK3FuncDetector::test_non_stream_mid_text_partial_marker_preserved_unchanged",
        "CONTENT<|close|> more", thinking=False, reasoning=None, content="CONTENT",
        departure="as test_quoted_call_token_without_attributes_survives: in raw output a close marker is a token "
                  "and ' more' the header the output ended inside; chat mode keeps server text intact."),
    *(Out(f"{SGL_REASONING}::TestKimiK3FuncDetector::test_non_stream_plain_text_untouched[{t!r}]", t,
          thinking=False, reasoning=None, content=t) for t in ("plain text", "a < b", "a <", "x <|clo")),
    Out(f"{SGL_REASONING}::TestKimiK3FuncDetector::test_non_stream_tools_open_partial_suffix_stripped",
        "hi<|open|>tools", thinking=False, reasoning=None, content="hi"),
]


def _summary(reasoning: str | None, content: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"reasoning": reasoning, "content": content, "calls": calls}


@pytest.mark.parametrize("case", OUTPUTS, ids=[c.source.split("::")[1][:90] for c in OUTPUTS])
def test_peer_output_case(case: Out) -> None:
    text = case.text if isinstance(case.text, str) else "".join(case.text)
    want = _summary(case.reasoning, case.content, case.calls)
    out = parse(text, thinking=case.thinking)
    assert _summary(out.reasoning_content, out.content, [(c.name, c.arguments) for c in out.tool_calls]) == want
    chunkings = [[text[i : i + n] for i in range(0, len(text), n)] for n in (1, 3, 7)]
    for chunks in ([case.text] if isinstance(case.text, list) else []) + chunkings:
        parser = StreamParser(case.thinking, id_factory=map("id{}".format, itertools.count()).__next__)
        for chunk in chunks:
            parser.feed(chunk)
        parser.finish()
        got = parser.result()
        assert _summary(got.reasoning_content, got.content, [(c.name, c.arguments) for c in got.tool_calls]) == want


def test_peer_call_ids_are_unique_across_messages() -> None:
    # vLLM tests/tool_use::test_tool_call_ids_are_unique_across_messages
    first, second = (parse(tools(call("calc", 1))).tool_calls[0].id for _ in range(2))
    assert first != second


# -- requests: Moonshot's Kimi Vendor Verifier -----------------------------------------------------


def _fn(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "A tool.",
                                             "parameters": {"type": "object", "properties": {}}}}


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather of a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
HELLO = [{"role": "user", "content": "hello"}]


def dynamic(*tool_list: Any, content: str = "") -> dict[str, Any]:
    return {"role": "system", "content": content, "tools": list(tool_list)}


def without(field_name: str) -> dict[str, Any]:
    tool = _fn("good_tool")
    if field_name == "name":
        del tool["function"]["name"]
    else:
        del tool[field_name]
    return tool


REFUSED = [  # (verifier test, request, error class, words of the error)
    ("test_dynamic_tools.py::test_dynamic_tool_in_user_message_rejected",
     {"messages": [{"role": "user", "content": "hi", "tools": [WEATHER]}, *HELLO]}, InvalidRequestError, "carries tools"),
    ("test_dynamic_tools.py::test_dynamic_tool_in_assistant_message_rejected",
     {"messages": [*HELLO, {"role": "assistant", "content": "hello", "tools": [WEATHER]}, *HELLO]},
     InvalidRequestError, "carries tools"),
    ("test_dynamic_tools.py::test_content_and_dynamic_tools_nonempty_rejected",
     {"messages": [dynamic(WEATHER, content="not empty"), *HELLO]}, InvalidRequestError, "both tools and content"),
    ("test_dynamic_tools.py::test_dynamic_tool_missing_required_field_rejected[missing_type]",
     {"messages": [dynamic(without("type")), *HELLO]}, InvalidRequestError, "has no 'type'"),
    ("test_dynamic_tools.py::test_dynamic_tool_missing_required_field_rejected[missing_function]",
     {"messages": [dynamic(without("function")), *HELLO]}, MessageError, "invalid tool declaration"),
    ("test_dynamic_tools.py::test_dynamic_tool_missing_required_field_rejected[missing_name]",
     {"messages": [dynamic(without("name")), *HELLO]}, MessageError, "invalid tool declaration"),
    *((f"test_dynamic_tools.py::test_invalid_dynamic_tool_name_rejected[{why}]",
       {"messages": [dynamic(_fn(name)), *HELLO]}, InvalidRequestError, "is not one a K3 endpoint accepts")
      for name, why in (("1bad_name", "starts_with_number"), ("bad@name", "special_char"), ("", "empty"),
                        ("a" * 257, "too_long_257"))),
    ("test_dynamic_tools.py::test_unsupported_tool_type_rejected",
     {"messages": [dynamic({"type": "bogus", "function": {"name": "x"}}), *HELLO]}, MessageError,
     "invalid tool declaration"),
    ("test_dynamic_tools.py::test_mixed_valid_and_bogus_type_tools_rejected",
     {"messages": [dynamic(_fn("good_tool"), {"type": "bogus", "function": {"name": "x"}}), *HELLO]}, MessageError,
     "invalid tool declaration"),
    ("test_dynamic_tools.py::test_dynamic_tools_not_array_rejected",
     {"messages": [{"role": "system", "content": "", "tools": {"type": "function"}}, *HELLO]}, MessageError,
     "as a tool declaration"),
    ("test_dynamic_tools.py::test_dynamic_tools_item_not_object_rejected",
     {"messages": [dynamic(None), *HELLO]}, MessageError, "cannot use NoneType as a tool declaration"),
    ("test_dynamic_tools.py::test_duplicate_dynamic_tool_names_rejected",
     {"messages": [dynamic(_fn("dup"), _fn("dup")), *HELLO]}, InvalidRequestError, "duplicate tool name"),
    ("test_dynamic_tools.py::test_duplicate_tool_names_across_dynamic_messages_rejected",
     {"messages": [dynamic(_fn("dup")), dynamic(_fn("dup")), *HELLO]}, InvalidRequestError,
     r"duplicate tool name\(s\) in system message #1: 'dup'"),
    ("test_dynamic_tools.py::test_duplicate_tool_name_between_global_and_dynamic_rejected",
     {"tools": [_fn("dup")], "messages": [dynamic(_fn("dup")), *HELLO]}, InvalidRequestError,
     r"duplicate tool name\(s\) in system message #0: 'dup'"),
    ("test_dynamic_tools.py::test_tool_role_without_tool_call_id_rejected",
     {"messages": [{"role": "tool", "content": "some tool result"}, *HELLO]}, InvalidRequestError, "no tool_call_id"),
    ("test_tool_choice.py::test_tool_choice_required_without_tools_rejected",
     {"messages": HELLO, "tool_choice": "required"}, InvalidRequestError, "with no tools declared"),
    ("test_tool_choice.py::test_tool_choice_with_empty_tools_rejected",
     {"messages": HELLO, "tools": [], "tool_choice": "required"}, InvalidRequestError, "with no tools declared"),
    ("test_tool_choice.py::test_tool_choice_invalid_value_rejected",
     {"messages": HELLO, "tools": [WEATHER], "tool_choice": "bogus"}, MessageError, "supports tool_choice"),
    ("test_tool_choice.py::test_tool_choice_named_function_rejected (skipped there: the endpoint ignores it)",
     {"messages": HELLO, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     MessageError, "supports tool_choice"),
    ("test_response_format.py::test_invalid_response_format_rejected",
     {"messages": HELLO, "response_format": {"type": "bogus"}}, MessageError, "unknown response_format type"),
    ("test_response_format.py::test_json_schema_missing_name_rejected",
     {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
     InvalidRequestError, "needs a 'name'"),
    ("test_response_format.py::test_json_schema_missing_schema_rejected",
     {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {"name": "weather"}}},
     InvalidRequestError, "needs a 'schema' object"),
    ("test_response_format.py::test_json_schema_missing_json_schema_rejected",
     {"messages": HELLO, "response_format": {"type": "json_schema"}}, InvalidRequestError, "needs a 'json_schema'"),
    ("test_response_format.py::test_json_schema_strict_non_boolean_rejected",
     {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {
         "name": "weather", "strict": "yes", "schema": {"type": "object"}}}}, InvalidRequestError,
     "'strict' must be true or false"),
    ("test_response_format.py::test_json_schema_schema_not_object_rejected",
     {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": "x"}}},
     InvalidRequestError, "got a str 'schema'"),
    ("(kind of test_json_schema_strict_non_boolean_rejected) a tool's strict that is not a boolean",
     {"messages": HELLO, "tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, MessageError,
     "function.strict"),
]  # fmt: skip

ACCEPTED = [  # (verifier test, request)
    ("test_dynamic_tools.py::test_dynamic_tool_in_system_callable",
     {"messages": [dynamic(WEATHER), {"role": "user", "content": "weather in beijing?"}], "tool_choice": "required"}),
    ("test_dynamic_tools.py::test_dynamic_tool_after_user_message",
     {"messages": [{"role": "user", "content": "weather?"}, dynamic(WEATHER)], "tool_choice": "required"}),
    ("test_dynamic_tools.py::test_three_dynamic_tools_in_one_message",
     {"messages": [dynamic(_fn("get_weather"), _fn("get_time"), _fn("get_news")), *HELLO], "tool_choice": "required"}),
    ("test_dynamic_tools.py::test_two_dynamic_messages_with_distinct_tools",
     {"messages": [dynamic(_fn("get_weather")), dynamic(_fn("get_time")), *HELLO], "tool_choice": "required"}),
    ("test_dynamic_tools.py::test_dynamic_tool_strict_false",
     {"messages": [dynamic({"type": "function", "function": {**WEATHER["function"], "strict": False}}), *HELLO]}),
    ("test_dynamic_tools.py::test_global_and_dynamic_tools_coexist",
     {"tools": [_fn("get_stock_price")], "messages": [dynamic(WEATHER), *HELLO], "tool_choice": "required"}),
    ("test_tool_choice.py::test_tool_choice_without_tools_field_accepted[none]", {"messages": HELLO, "tool_choice": "none"}),
    ("test_tool_choice.py::test_tool_choice_without_tools_field_accepted[auto]", {"messages": HELLO, "tool_choice": "auto"}),
    ("test_response_format.py::test_json_schema_strict / _non_strict",
     {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {
         "name": "weather", "strict": True, "schema": {"type": "object"}}}}),
    ("test_response_format.py::test_json_object / test_text_default",
     {"messages": HELLO, "response_format": {"type": "json_object"}}),
    ("(the verifier's bounds) a 256-character tool name, and kimik3's own '.' and '-' names",
     {"tools": [_fn("a" * 256), _fn("github.create_issue"), _fn("read-file"), _fn("_private")], "messages": HELLO}),
]  # fmt: skip


@pytest.mark.parametrize(("test", "request_", "error", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_verifier_refused_requests_are_refused_before_any_network_call(
    test: str, request_: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        ChatRequest(**request_)


@pytest.mark.parametrize(("test", "request_"), ACCEPTED, ids=[r[0] for r in ACCEPTED])
def test_verifier_accepted_requests_are_accepted(test: str, request_: dict[str, Any]) -> None:
    ChatRequest(**request_)


# -- the peers' known departures from Moonshot's reference ------------------------------------------
# (found when their cases ran against kimik3; kimik3 follows the reference, encoding_k3.py)


def test_departure_vllm_splits_a_system_message_with_content_and_tools() -> None:
    # vLLM's chat-message parsing sends such a message on as two (tools, then the text); the reference
    # renders the tools and drops the content. kimik3 refuses it (InvalidRequestError): neither half may
    # vanish silently, and the Vendor Verifier wants 400 (test_content_and_dynamic_tools_nonempty_rejected)
    with pytest.raises(InvalidRequestError, match=r"carries both tools \(1\) and content"):
        render([dynamic(WEATHER, content="Be brief."), *HELLO])


def test_departure_vllm_drops_a_client_supplied_tool_attribute_on_an_unmatched_tool_message() -> None:
    # a tool message whose tool_call_id matches no call: the reference renders the message's own
    # `tool` (kimik3: its name, input key `tool` too); vLLM's parsing drops the key, so it renders the
    # call's name by position instead
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    text = render([*HELLO, assistant, {"role": "tool", "tool_call_id": "zz", "tool": "weather", "content": "x"}],
                  add_generation_prompt=False)
    assert text.endswith(f'{OPEN}message role="tool" tool="weather" index="1"{SEP}x{CLOSE}message{SEP}{END_OF_MSG}')


GROUNDTRUTH = load_json("k3/verifier_groundtruth.json")  # the verifier's payload (tests/data/k3/PROVENANCE.md)


def test_departure_verifier_groundtruth_is_kimik3s_count_less_one_empty_think_block() -> None:
    # test_prompt_tokens_match_groundtruth is skipped in the verifier ("skip, not pass"): its 539 is
    # what kimik3 counts (545, Moonshot's convention: the prompt without the 3-token generation stub)
    # less the 6 tokens of the historical assistant turn's empty think block, which the reference
    # keeps (preserved thinking: every past assistant message keeps its think channel)
    tok = default_tokenizer()
    kw = {"thinking_effort": "high", "tool_choice": "auto", "response_format": GROUNDTRUTH["response_format"]}
    ids = tok.encode_messages(GROUNDTRUTH["messages"], GROUNDTRUTH["tools"], **kw)
    text = render(GROUNDTRUTH["messages"], GROUNDTRUTH["tools"], **kw)
    empty_think = THINK_OPEN + THINK_CLOSE
    assert text.count(empty_think) == 1
    assert len(tok.encode_control(empty_think)) == 6
    assert len(ids) - 3 == 545 and 545 - 6 == 539
