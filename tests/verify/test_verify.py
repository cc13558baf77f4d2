"""``kimik3.verify`` / ``kimik3 verify`` against a loopback server that misbehaves in known ways
(tests/verify/fake_server.py): every departure is a failing row with its evidence, documented
conventions are recognised, and what conforms passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3 import TokenizerError, verify
from kimik3._verify import CONVENTIONS, VerifyReport, expected_counts, malformed_requests, probes, walle_schemas
from kimik3.cli import main
from kimik3.formats.k3 import K3Tokenizer, default_tokenizer
from tests.verify.fake_server import fake_server


@pytest.fixture(scope="module")
def report() -> VerifyReport:
    with fake_server() as url:
        return verify(url, schemas=walle_schemas())


def test_walle_schemas_are_all_there() -> None:
    schemas = walle_schemas()
    assert len(schemas) == 212
    assert len({name.split("#")[0] for name, _ in schemas}) == 16
    assert schemas[0][0] == "TestAdditionalProperties#1"


def test_moonshot_documented_convention_is_recognised(report: VerifyReport) -> None:
    assert report.convention is not None and report.convention.name == "minus generation stub"
    row = report["prompt_tokens convention"]
    assert row.status == "pass" and "fits 16/20 requests" in row.evidence
    # Moonshot's published example: 99 under its rule
    assert report["prompt_tokens: assistant_hello (Moonshot's documented case)"].evidence == "server 99 = kimik3 99"
    assert report["prompt_tokens: plain"].status == "pass"
    assert report["prompt_tokens: text parts"].status == "pass"


def test_dropped_reasoning_fails_two_rows(report: VerifyReport) -> None:
    assert report["prompt_tokens: tool history with reasoning"].evidence == "server 444, kimik3 463 (server -19)"
    row = report["reasoning round-trip (replayed turn)"]
    assert row.status == "fail" and "dropped the replayed reasoning (19 tokens fewer)" in row.evidence


@pytest.mark.parametrize(("size", "ours"), [("28x28", 98), ("640x480", 511), ("1000x3000", 3987)])
def test_image_miscount_names_the_request_and_difference(report: VerifyReport, size: str, ours: int) -> None:
    row = report[f"prompt_tokens: image {size}"]
    assert row.status == "fail"
    assert row.evidence == f"server 345, kimik3 {ours} (server {345 - ours:+d})"


def test_rejection_rows(report: VerifyReport) -> None:
    assert report["rejects: tools on a user message"].status == "pass"
    assert report["rejects: system message with tools and content"].status == "pass"
    assert report["rejects: reasoning_effort medium"].status == "pass"
    dup = report["rejects: duplicate tool names"]
    assert dup.status == "fail" and dup.evidence.startswith("HTTP 500: internal error")
    no_id = report["rejects: tool message without tool_call_id"]
    assert no_id.status == "warn"
    assert no_id.evidence == ("accepted (HTTP 200), K3's contract says 400; "
                              "kimik3 refuses it client-side (InvalidRequestError)")  # fmt: skip


def test_raw_mode_disagreement(report: VerifyReport) -> None:
    assert report["raw mode agreement: plain"].evidence == "/v1/completions counted 98 of kimik3's 97 ids"
    assert report["raw mode agreement: tool history with reasoning"].status == "fail"


def test_model_rows(report: VerifyReport) -> None:
    assert report["reasoning field"].evidence == (
        "no reasoning under reasoning_content or reasoning; message fields: ['content', 'role', 'thinking']"
    )
    assert report["tool_choice required"].status == "pass"
    assert report["tool_choice none"].evidence == "called ['read_file'] despite tool_choice none"
    assert report["response_format json_schema"].status == "fail"
    assert report["dynamic tools in a system message are callable"].evidence == "expected a get_weather call, got none"
    for streamed in ("non-streamed", "streamed"):
        row = report[f"tool arguments valid (walle, {streamed})"]
        assert row.status == "fail" and row.needs_model
        assert row.evidence.startswith("137/212 invalid; TestAnyOf#1: {} is not valid under any of the given schemas")


def test_table_shows_every_failing_row(report: VerifyReport) -> None:
    text = str(report)
    failing = [r.check for r in report.rows if r.status == "fail"]
    assert len(failing) == 14 and not report.ok
    for check in failing:
        assert re.search(rf"^{re.escape(check)}( \*)?\s+FAIL\s+\S", text, re.M), check
    assert text.splitlines()[-1] == "verify: FAILED (14 rows)"


def test_cli_quick_runs_wire_rows_only_and_exits_1() -> None:
    with fake_server() as url:
        result = CliRunner().invoke(main, ["verify", "--base-url", url, "--quick", "--no-images"])
    assert result.exit_code == 1, result.output
    assert "prompt_tokens: tool history with reasoning" in result.output
    assert "image" not in result.output and "walle" not in result.output and " *  " not in result.output
    assert result.output.rstrip().endswith("verify: FAILED (5 rows)")


TINY = Path(__file__).resolve().parents[2] / "models" / "k3-tiny"


def test_a_served_model_with_its_own_vocabulary_gets_the_tokenizer_hint() -> None:
    tiny = K3Tokenizer.from_pretrained(TINY)
    with fake_server(tokenizer=tiny, root=str(TINY)) as url:
        result = CliRunner().invoke(main, ["verify", "--base-url", url, "--quick", "--no-images"])
        report = verify(url, quick=True, images=False)
        given = verify(url, quick=True, images=False, tokenizer=str(TINY))  # a path, as the docstring shows
    assert result.exit_code == 1, result.output
    hint = (f"14 of 17 prompt_tokens counts differ from K3's vocabulary: the served model may have its own (e.g. "
            f"k3-tiny); pass its tokenizer: kimik3 verify --tokenizer {TINY} (kimik3.verify(url, tokenizer='{TINY}'))")
    assert report.hint == hint and f"hint: {hint}" in result.output and str(report).endswith(f"hint: {hint}\nverify: FAILED (19 rows)")
    assert given.hint is None and len(given.failures()) == 5  # the fake's own departures, as with K3's vocabulary
    rows = [r for r in given.rows if r.check.startswith("prompt_tokens: ")]
    assert len(rows) == 17 and [r.check for r in rows if r.status != "pass"] == ["prompt_tokens: tool history with reasoning"]
    with fake_server(tokenizer=tiny) as url:  # no path from /models: the hint says DIR
        assert verify(url, quick=True, images=False).hint.endswith("--tokenizer DIR (kimik3.verify(url, tokenizer='DIR'))")


def test_verify_tokenizer_must_be_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError):
        verify("http://127.0.0.1:9/v1", quick=True, tokenizer=str(tmp_path))


def test_unreachable_endpoint_is_a_failed_row_not_an_exception() -> None:
    report = verify("http://127.0.0.1:9/v1", quick=True)
    assert [r.check for r in report.rows] == ["endpoint"] and report.rows[0].status == "fail"
    assert "ConnectError" in report.rows[0].evidence and not report.ok


# -- what verify computes ----------------------------------------------------------------------


def test_expected_counts_per_convention() -> None:
    tok = default_tokenizer()
    by = {p.name: p for p in probes()}
    hello = expected_counts(by["assistant_hello (Moonshot's documented case)"], tok)
    assert hello == {"whole prompt": 102, "minus generation stub": 99,
                     "minus stub and empty think blocks": 93, "whole prompt without empty think blocks": 96}  # fmt: skip
    history = by["history without reasoning"]
    assert history.empty_think_turns() == 2
    counts = expected_counts(history, tok)
    assert counts["whole prompt"] - counts["whole prompt without empty think blocks"] == 12
    assert CONVENTIONS[0].name == "whole prompt"


def test_image_probe_counts_follow_k3s_processor() -> None:
    tok = default_tokenizer()
    image = next(p for p in probes() if p.name == "image 640x480")
    text_only = len(image.ids(tok))
    # placeholder -> <|media_begin|> "image 640x480" <|media_content|> 414 pads <|media_end|>
    label = len(tok.encode_text("image 640x480"))
    assert image.prompt_tokens(tok) == text_only - 1 + 3 + label + 414


def test_every_malformed_request_is_refused_by_kimik3_itself() -> None:
    from kimik3 import ModelSettings
    from kimik3.engines import ChatRequest

    for name, body in malformed_requests():
        with pytest.raises(Exception) as info:
            ChatRequest(messages=body["messages"], tools=body.get("tools") or [],
                        settings=ModelSettings(reasoning_effort=body.get("reasoning_effort", "max")))  # fmt: skip
        assert type(info.value).__name__ in ("InvalidRequestError", "InvalidEffortError"), name



def test_a_full_run_says_where_it_is_on_each_stage_and_through_the_walle_passes() -> None:
    # issue 43: `kimik3 verify` (full) printed nothing for about 15 minutes
    steps: list[str] = []
    with fake_server() as url:
        verify(url, schemas=walle_schemas()[:40], images=False, on_step=steps.append)
        result = CliRunner().invoke(main, ["verify", "--base-url", url, "--quick", "--no-images"])
    n = len(probes(images=False))
    walle = [[f"tool arguments valid (walle, {kind}): 40 generations",
              *[f"tool arguments valid (walle, {kind}): {k}/40" for k in range(2, 41, 2)]]
             for kind in ("non-streamed", "streamed")]
    assert steps == [f"prompt_tokens and wire checks: {n} requests", "rejected requests",
                     "raw mode (/v1/completions)", "model checks: 5 generations", *walle[0], *walle[1]]
    # the command prints the stages on stderr, each with the seconds since it started; stdout keeps the rows
    assert [re.sub(r" \(\d+ s\)$", "", line) for line in result.stderr.splitlines()] == [
        f"... prompt_tokens and wire checks: {n} requests", "... rejected requests", "... raw mode (/v1/completions)"]
    assert all(re.search(r" \(\d+ s\)$", line) for line in result.stderr.splitlines())
    assert "..." not in result.stdout
