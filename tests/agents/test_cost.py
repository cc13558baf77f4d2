"""Cost: the price table, the arithmetic against hand-computed values, RunResult.cost and the
per-turn cost (events, session, ``kimik3 show``), and ``Budgets(usd=...)`` ending a run."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from kimik3 import Agent, Budgets, Pricing, ScriptedEngine, TurnEndEvent, Usage, UserError, tool
from kimik3._pricing import PRICES, pricing_for
from kimik3.agents import FinalEvent, format_session, read_session_records
from kimik3.formats.k3 import RawChunk, render_output
from kimik3.types import ChatRequest, PromptTokensDetails


class UsageEngine(ScriptedEngine):
    """A ScriptedEngine whose calls report the given (prompt, completion, cached) usage, as vLLM
    reports it (``RawChunk`` counts on the last chunk)."""

    def __init__(self, responses: Sequence[str], usages: Sequence[tuple[int, int, int | None]], model: str = "x") -> None:
        super().__init__(responses, model=model)
        self.usages = list(usages)

    async def generate(self, prompt_ids: Sequence[int], request: ChatRequest, *,
                       images: Sequence[Any] = ()) -> AsyncGenerator[RawChunk, None]:
        prompt, completion, cached = self.usages.pop(0)
        async for chunk in super().generate(prompt_ids, request, images=images):
            if chunk.finish_reason is not None:
                chunk = RawChunk(finish_reason=chunk.finish_reason, prompt_tokens=prompt,
                                 completion_tokens=completion, cached_tokens=cached)
            yield chunk


@tool
def note(text: str) -> str:
    """Keep a note.

    Args:
        text: the note.
    """
    return "kept"


CALL = render_output({"reasoning_content": "note it", "tool_calls": [
    {"id": "note:0", "function": {"name": "note", "arguments": '{"text": "a"}'}}]})
K3 = Pricing(input=3.0, cached_input=0.30, output=15.0)


def usage(prompt: int, completion: int, cached: int | None) -> Usage:
    details = PromptTokensDetails(cached_tokens=cached) if cached is not None else None
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                 prompt_tokens_details=details)


def test_costs_are_shown_with_their_significant_digits() -> None:
    from kimik3._pricing import format_usd

    assert [format_usd(x) for x in (0, 0.0492, 12.5, 0.000123, 0.0000042)] == [
        "$0.0000", "$0.0492", "$12.5000", "$0.000123", "$4.20e-06"]


def test_price_table_is_moonshots_hosted_prices_by_exact_id() -> None:
    assert PRICES["kimi-k3"] == Pricing(input=3.0, cached_input=0.30, output=15.0)
    # K3.1 (2026-10-23): cache reads $0.20/M, writes $2/M (5 minutes) and $4/M (1 hour)
    assert PRICES["kimi-k3.1-pro"] == Pricing(2.0, 0.20, 10.0, cache_write=2.0, cache_write_1h=4.0)
    assert pricing_for("Kimi-K3.1-Pro") == PRICES["kimi-k3.1-pro"]  # ids are case-insensitive
    # Highspeed is priced apart and no source gives its figures: no price rather than an invented one
    assert "kimi-k3.1-pro-highspeed" not in PRICES and pricing_for("kimi-k3.1-pro-highspeed") is None
    # self-hosted names are not Moonshot's API: no price
    for model in ("moonshotai/Kimi-K3", "/models/Kimi-K3", "models/k3-tiny", "scripted-k3", "", None):
        assert pricing_for(model) is None, model


def test_cost_arithmetic_against_hand_computed_values() -> None:
    # K3: 6,000 fresh prompt tokens * $3/M + 4,000 cached * $0.30/M + 2,000 completion * $15/M
    #   = 0.018 + 0.0012 + 0.030 = 0.0492
    assert K3.cost(usage(10_000, 2_000, 4_000)) == pytest.approx(0.0492, abs=1e-12)
    # K3.1 Pro, nothing cached reported: 1M prompt * $2 + 0.5M completion * $10 = 2 + 5
    assert PRICES["kimi-k3.1-pro"].cost(usage(1_000_000, 500_000, None)) == pytest.approx(7.0, abs=1e-12)
    # all cached: 1M * $0.20
    assert PRICES["kimi-k3.1-pro"].cost(usage(1_000_000, 0, 1_000_000)) == pytest.approx(0.2, abs=1e-12)
    # a server claiming more cached than prompt tokens: billed as all cached, never negative
    assert K3.cost(usage(100, 0, 150)) == pytest.approx(100 * 0.30 / 1e6, abs=1e-15)


def cache_usage(prompt: int, completion: int, cached: int, written: int | None, written_1h: int | None) -> Usage:
    details = PromptTokensDetails(cached_tokens=cached, cache_write_tokens=written, cache_write_1h_tokens=written_1h)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                 prompt_tokens_details=details)


def test_cache_writes_are_priced_per_lifetime() -> None:
    pro = PRICES["kimi-k3.1-pro"]
    # 100,000 prompt: 20,000 cached ($0.20), 50,000 written for 5 min ($2), 30,000 fresh ($2); 1,000 out ($10)
    assert pro.cost(cache_usage(100_000, 1_000, 20_000, 50_000, None)) == pytest.approx(
        (30_000 * 2.0 + 20_000 * 0.20 + 50_000 * 2.0 + 1_000 * 10.0) / 1e6, abs=1e-12)  # $0.174
    # the same writes with a 1-hour lifetime: $4/M -> $0.100 more
    assert pro.cost(cache_usage(100_000, 1_000, 20_000, 50_000, 50_000)) == pytest.approx(0.274, abs=1e-12)
    # a mix: 10,000 of the writes for 1 hour
    assert pro.cost(cache_usage(100_000, 0, 0, 50_000, 10_000)) == pytest.approx(
        (50_000 * 2.0 + 40_000 * 2.0 + 10_000 * 4.0) / 1e6, abs=1e-12)
    # K3 bills no write apart: written tokens cost its input price
    assert K3.cost(cache_usage(10_000, 0, 0, 10_000, 10_000)) == pytest.approx(0.03, abs=1e-12)
    # counts beyond the prompt are bounded by it: cached first, then writes; never negative
    assert pro.cost(cache_usage(1_000, 0, 800, 900, 900)) == pytest.approx((800 * 0.20 + 200 * 4.0) / 1e6, abs=1e-15)


def test_cache_writes_sum_over_calls_and_stay_unknown_when_never_reported() -> None:
    total = cache_usage(10, 1, 2, 5, 3) + cache_usage(20, 1, 4, 7, None) + usage(30, 1, 6)
    assert (total.cached_tokens, total.cache_write_tokens, total.cache_write_1h_tokens) == (12, 12, 3)
    assert (usage(1, 1, 1) + usage(2, 1, None)).prompt_tokens_details == PromptTokensDetails(cached_tokens=1)
    # a session record keeps the old shape when no write was reported
    assert usage(5, 1, 2).model_dump(exclude_none=True)["prompt_tokens_details"] == {"cached_tokens": 2}


def test_show_prints_cache_writes_apart() -> None:
    from kimik3.agents._fork import _usage

    assert _usage(cache_usage(100_000, 1_000, 20_000, 50_000, 50_000), 0.274) == (
        "usage: 100000 prompt, 20000 cached (20%), 50000 written to cache (50000 for 1h) + 1000 completion "
        "tokens, $0.2740")


@pytest.mark.parametrize("bad", [{"input": -1, "cached_input": 0, "output": 0},
                                 {"input": 1, "cached_input": float("nan"), "output": 0},
                                 {"input": 1, "cached_input": 0, "output": "15"},
                                 {"input": 1, "cached_input": 0, "output": 1, "cache_write_1h": -4}])
def test_pricing_refuses_prices_that_are_not_finite_non_negative_numbers(bad: dict[str, Any]) -> None:
    with pytest.raises(UserError, match="Pricing"):
        Pricing(**bad)


def test_run_cost_and_per_turn_cost_include_cached_tokens(tmp_path: Path) -> None:
    engine = UsageEngine([CALL, "done"], [(10_000, 2_000, 4_000), (12_100, 60, 10_000)])
    agent = Agent(tools=[note], engine=engine, pricing=K3)
    session = tmp_path / "s.jsonl"

    async def main() -> tuple[list[TurnEndEvent], Any]:
        ends, final = [], None
        async for e in agent.run_stream("note a", session=session):
            if isinstance(e, TurnEndEvent):
                ends.append(e)
            elif isinstance(e, FinalEvent):
                final = e.result
        return ends, final

    ends, result = anyio.run(main)
    turn2 = (2_100 * 3.0 + 10_000 * 0.30 + 60 * 15.0) / 1e6  # 0.0063 + 0.003 + 0.0009 = 0.0102
    assert [e.cost for e in ends] == [pytest.approx(0.0492), pytest.approx(0.0102)]
    assert turn2 == pytest.approx(0.0102)
    assert result.cost == pytest.approx(0.0492 + 0.0102)
    assert result.usage.cached_tokens == 14_000
    # the session records each call's cost and finish reason, and what its requests carried
    records = read_session_records(session)
    turns = [r for r in records if r.usage is not None]
    assert [r.cost for r in turns] == [pytest.approx(0.0492), pytest.approx(0.0102)]
    assert [r.finish_reason for r in turns] == ["tool_calls", "stop"]
    start = next(r.run_start for r in records if r.run_start is not None)
    assert [t["function"]["name"] for t in start["tools"]] == ["note"]
    assert start["model"] == "x" and start["settings"]["temperature"] == 1.0
    # kimik3 show: per turn, the cache-hit share and the cost; the total sums the turns
    text = format_session(session)
    assert "usage: 10000 prompt, 4000 cached (40%) + 2000 completion tokens, $0.0492" in text
    assert "usage: 12100 prompt, 10000 cached (83%) + 60 completion tokens, $0.0102" in text
    assert "2 turns; total usage: 22100 prompt, 14000 cached (63%) + 2060 completion tokens, $0.0594" in text


def test_auto_pricing_is_chosen_by_the_engines_model_id() -> None:
    priced = UsageEngine(["hi"], [(1_000_000, 100_000, 0)], model="kimi-k3.1-pro")
    result = anyio.run(Agent(engine=priced).run, "hi")
    assert result.cost == pytest.approx(2.0 + 1.0)
    unpriced = UsageEngine(["hi"], [(1_000_000, 100_000, 0)], model="/models/Kimi-K3")
    result = anyio.run(Agent(engine=unpriced).run, "hi")
    assert result.cost is None
    off = UsageEngine(["hi"], [(1_000_000, 100_000, 0)], model="kimi-k3")
    result = anyio.run(Agent(engine=off, pricing=None).run, "hi")  # self-hosted under a hosted name
    assert result.cost is None


def test_auto_pricing_waits_for_the_completions_model_when_the_engine_does_not_know_it() -> None:
    engine = UsageEngine(["hi"], [(1_000_000, 100_000, 0)], model="")  # a RemoteEngine before /models
    original = engine.generate

    async def named(*a: Any, **kw: Any) -> AsyncGenerator[RawChunk, None]:
        engine.model = "kimi-k3"  # the completion names its model
        async for chunk in original(*a, **kw):
            yield chunk

    engine.generate = named  # type: ignore[method-assign]
    result = anyio.run(Agent(engine=engine).run, "hi")
    assert result.cost == pytest.approx(3.0 + 1.5)  # 1M input at $3, 100k output at $15 per 1M


def test_cost_budget_ends_the_run_gracefully_with_a_summary_turn(tmp_path: Path) -> None:
    # turn 1 costs 0.0492 > $0.04: no second tool turn; one summary turn, then cost_budget
    engine = UsageEngine([CALL, "summary so far", CALL], [(10_000, 2_000, 4_000), (11_000, 20, 10_000),
                                                           (11_000, 20, 10_000)])
    agent = Agent(tools=[note], engine=engine, pricing=K3, budgets=Budgets(usd=0.04))
    result = anyio.run(agent.run, "note a")
    assert result.stop_reason == "cost_budget"
    assert result.turns == 2 and result.output == "summary so far"
    assert engine.calls[1].request.tool_choice == "none"  # the summary turn has no tools
    assert engine.remaining == 1 and len(engine.calls) == 2  # no third call
    summary = (1_000 * 3.0 + 10_000 * 0.30 + 20 * 15.0) / 1e6
    assert result.cost == pytest.approx(0.0492 + summary)
    assert result.degraded


def test_cost_budget_not_reached_lets_the_run_finish() -> None:
    engine = UsageEngine([CALL, "done"], [(1_000, 10, 0), (1_100, 10, 1_000)])
    result = anyio.run(Agent(tools=[note], engine=engine, pricing=K3, budgets=Budgets(usd=1.0)).run, "note a")
    assert result.stop_reason == "completed" and result.turns == 2


def test_max_turns_keeps_the_cost_budget() -> None:
    agent = Agent(engine=ScriptedEngine(["x"]), pricing=K3, budgets=Budgets(usd=0.5, tokens=9), max_turns=3)
    assert agent.budgets == Budgets(turns=3, tokens=9, usd=0.5)


def test_a_cost_budget_without_prices_is_a_user_error_before_any_call() -> None:
    with pytest.raises(UserError, match=r"Budgets\(usd=...\) needs prices"):
        Agent(engine=ScriptedEngine(["x"]), pricing=None, budgets=Budgets(usd=1.0))
    engine = ScriptedEngine(["x"], model="/models/Kimi-K3")  # auto: this id has no price
    with pytest.raises(UserError, match="model '/models/Kimi-K3' has none"):
        anyio.run(Agent(engine=engine, budgets=Budgets(usd=1.0)).run, "hi")
    assert engine.calls == []  # nothing was spent
    with pytest.raises(UserError, match=r"Budgets\.usd"):
        Budgets(usd=0)
    with pytest.raises(UserError, match=r"Agent\(pricing=\.\.\.\)"):
        Agent(engine=ScriptedEngine(["x"]), pricing={"input": 3})  # type: ignore[arg-type]


def test_cli_usage_line_and_live_status_show_cache_share_and_cost() -> None:
    from rich.console import Console

    from kimik3.agents import RunResult
    from kimik3.cli.progress import PlainProgress, _RichProgress
    from kimik3.types import AssistantMessage

    result: RunResult[str] = RunResult(output="ok", messages=[], usage=usage(10_000, 2_000, 4_000), turns=1,
                                       stop_reason="completed", cost=0.0492)
    lines: list[str] = []
    plain = PlainProgress()
    plain._echo = lines.append  # type: ignore[method-assign]
    plain.summary(result, None)
    assert lines == ["usage: 1 turn, 0 tool calls, 12000 tokens, 40% cached, $0.0492"]
    unpriced: RunResult[str] = RunResult(output="ok", messages=[], usage=usage(10, 2, None), turns=1,
                                         stop_reason="completed")
    lines.clear()
    plain.summary(unpriced, None)
    assert lines == ["usage: 1 turn, 0 tool calls, 12 tokens"]  # nothing unknown is shown

    console = Console(record=True, width=200, force_terminal=False)
    live = _RichProgress(console)
    live.event(TurnEndEvent(1, AssistantMessage(content="x"), usage(10_000, 2_000, 4_000), 0.0492))
    live.event(TurnEndEvent(2, AssistantMessage(content="y"), usage(10_000, 0, 10_000), 0.003))
    console.print(live)
    status = console.export_text()
    assert "turn 3 · 0 tool calls · 22,000 tokens · 70% cached · $0.0522 · " in status
    console.print(live)  # (the status is rendered again each refresh)
    live.summary(result, None)
    assert "1 turn · 0 tool calls · 12,000 tokens · 40% cached · $0.0492" in console.export_text()


def test_a_session_without_costs_still_shows(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    lines = [{"kimik3_session": 1, "created": 0, "tools": []},
             {"message": {"role": "user", "content": "hi"}},
             {"message": {"role": "assistant", "content": "hello"}, "usage": {"prompt_tokens": 5,
                                                                              "completion_tokens": 1,
                                                                              "total_tokens": 6}}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    assert "[1] assistant  turn 1  usage: 5 prompt + 1 completion tokens\n" in format_session(path)


# -- sub-agents: their cost is the parent's, and the parent's USD budget holds for them ---------


def delegate(*prompts: str) -> str:
    return render_output({"reasoning_content": "delegate", "tool_calls": [
        {"id": f"task:{i}", "function": {"name": "task", "arguments": json.dumps({"description": "d", "prompt": p})}}
        for i, p in enumerate(prompts)]})


def parent_with_children(engine: UsageEngine, budgets: Budgets | None = None) -> tuple[Agent[str], Any]:
    from kimik3 import Client
    from kimik3.harness._tasks import SubAgents

    client = Client(engine)
    subs = SubAgents(client, [note])
    return Agent(tools=[subs.tool()], client=client, hooks=[subs], pricing=K3, budgets=budgets), subs


def test_sub_agent_costs_are_added_to_the_parents_cost() -> None:
    # calls in order: parent turn 1 (task), the child's answer, parent turn 2 (answer)
    engine = UsageEngine([delegate("look"), "found it", "all done"],
                         [(10_000, 2_000, 4_000), (1_000, 100, 0), (12_100, 60, 10_000)])
    agent, subs = parent_with_children(engine)
    result = anyio.run(agent.run, "go")
    child = (1_000 * 3.0 + 100 * 15.0) / 1e6  # 0.003 + 0.0015 = 0.0045
    assert subs.children[0][2].cost == pytest.approx(0.0045) == pytest.approx(child)
    assert result.cost == pytest.approx(0.0492 + 0.0045 + 0.0102)  # 0.0639
    assert result.stop_reason == "completed" and result.output == "all done"


def test_the_parents_usd_budget_holds_for_its_children() -> None:
    # parent $0.06: turn 1 costs $0.0492, so the child may spend $0.0108: its first turn costs
    # $0.018 (1,000 prompt at $3 + 1,000 completion at $15 per 1M): it stops (cost_budget) after a
    # summary turn ($0.00315); the parent, over its budget with the child's cost, stops too
    engine = UsageEngine([delegate("work"), CALL, "child summary", "parent summary"],
                         [(10_000, 2_000, 4_000), (1_000, 1_000, 0), (1_000, 10, 0), (100, 10, 0)])
    agent, subs = parent_with_children(engine, Budgets(usd=0.06))
    result = anyio.run(agent.run, "go")
    child = subs.children[0][2]
    assert child.stop_reason == "cost_budget" and child.turns == 2
    assert child.cost == pytest.approx(0.018 + 0.00315)
    assert result.stop_reason == "cost_budget" and result.output == "parent summary"
    assert result.cost == pytest.approx(0.0492 + 0.02115 + (100 * 3.0 + 10 * 15.0) / 1e6)
    assert engine.usages == [] and len(engine.calls) == 4  # nothing more was spent
    [task_result] = [m for m in result.messages if m.role == "tool"]
    assert str(task_result.content).startswith("child summary\n[the sub-agent stopped early: cost_budget]\n")


def test_a_child_starting_when_the_runs_usd_budget_is_reserved_gets_an_error() -> None:
    # two children at once: the first reserves all that is left of the run's $1; the second
    # cannot start (no model call of its own)
    engine = UsageEngine([delegate("a", "b"), "a done", "both tried"],
                         [(1_000, 10, 0), (1_000, 10, 0), (1_000, 10, 0)])
    agent, _ = parent_with_children(engine, Budgets(usd=1.0))
    result = anyio.run(agent.run, "go")
    results = [str(m.content) for m in result.messages if m.role == "tool"]
    assert results[1] == ("Error: ToolError: this run's cost budget (Budgets(usd=...)) is used up; do the rest "
                          "yourself")
    assert results[0].startswith("a done\n[sub-agent: 1 turns")
    assert result.cost == pytest.approx(3 * (1_000 * 3.0 + 10 * 15.0) / 1e6)


def test_max_usd_is_a_budget_option_of_run_resume_chat_and_eval(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kimik3.cli import main
    from kimik3.eval import EvalConfig
    from kimik3.eval._suite import EvalTask

    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["hi"]))
    runner = CliRunner()
    out = runner.invoke(main, ["run", "say hi", "--script", str(script), "--max-usd", "0.5", "--plain",
                               "--sandbox", "none", "--workspace", str(tmp_path), "--session", str(tmp_path / "s.jsonl")])
    assert out.exit_code == 1  # refused at start, in the CLI's words (issue 40): no model call, no session left
    assert out.output.splitlines()[-1] == (
        "error: UserError: --max-usd needs prices: model 'scripted-k3' has none in kimik3's table (its hosted ids: "
        "kimi-k3, kimi-k3.1-pro); give them with --price IN,CACHED,OUT (USD per 1M tokens, e.g. --price 2,0.2,10)")
    assert not (tmp_path / "s.jsonl").exists()
    # --price gives a self-hosted model its prices: 2,467 prompt tokens (the full harness's
    # prompt) at $3 and 24 completion tokens at $15 per 1M = $0.007401 + $0.00036 = $0.007761
    priced = tmp_path / "priced.jsonl"
    out = runner.invoke(main, ["run", "say hi", "--script", str(script), "--max-usd", "0.5", "--price", "3,0.3,15",
                               "--plain", "--sandbox", "none", "--workspace", str(tmp_path), "--session", str(priced)])
    assert out.exit_code == 0, out.output
    assert "usage: 1 turn, 0 tool calls, 2491 tokens, $0.00776" in out.output.splitlines()
    [cost] = [r.cost for r in read_session_records(priced) if r.cost is not None]
    assert cost == pytest.approx(2_467 * 3.0 / 1e6 + 24 * 15.0 / 1e6)
    bad = runner.invoke(main, ["run", "x", "--script", str(script), "--price", "3,0.3"])
    assert bad.exit_code == 2 and "expected INPUT,CACHED,OUTPUT[,CACHE_WRITE[,CACHE_WRITE_1H]] in USD" in bad.output
    from kimik3.cli.engine import _price

    assert _price(None, None, "2,0.2,10,2,4") == PRICES["kimi-k3.1-pro"]  # type: ignore[arg-type]
    # eval run too: refused before any attempt, nothing written
    from tests.eval.helpers import write_task

    write_task(tmp_path / "suite", "t", "say hi", "true")
    out = runner.invoke(main, ["eval", "run", str(tmp_path / "suite"), "--out", str(tmp_path / "out"), "--script",
                               str(script), "--max-usd", "0.5", "--sandbox", "none"])
    assert out.exit_code == 1 and out.output.splitlines()[-1].startswith(
        "error: UserError: --max-usd needs prices: model 'scripted-k3' has none in kimik3's table"), out.output
    assert not (tmp_path / "out").exists()
    for command in (["resume"], ["chat"], ["eval", "run"]):
        help_text = runner.invoke(main, [*command, "--help"]).output
        assert "--max-usd USD" in help_text and "--price IN,CACHED,OUT" in help_text
    assert runner.invoke(main, ["run", "x", "--max-usd", "0"]).exit_code == 2
    task = EvalTask(name="t", path=tmp_path, instruction="i", check="true", budgets=Budgets(usd=0.2))
    assert EvalConfig(max_usd=0.5).budgets(task).usd == 0.2
    assert EvalConfig(max_usd=0.1).budgets(task).usd == 0.1
    assert EvalConfig(max_usd=0.1).budgets(EvalTask(name="u", path=tmp_path, instruction="i", check="true")).usd == 0.1


def test_chat_max_usd_caps_the_whole_chat_not_each_message(tmp_path: Path) -> None:
    # issue 40: $2.70 was spent under a $0.30 cap, each message having the whole cap. Each answer
    # here is 24 completion tokens at $1000/M = $0.024: under a $0.06 cap the third message gets
    # what is left ($0.012) and the fourth is not sent
    from click.testing import CliRunner

    from kimik3.cli import main

    script = tmp_path / "s.json"
    script.write_text(json.dumps([render_output({"content": t}) for t in ["one", "two", "three", "four"]]))
    session = tmp_path / "c.jsonl"
    out = CliRunner().invoke(main, ["chat", "--script", str(script), "--price", "0,0,1000", "--max-usd", "0.06",
                                    "--plain", "--session", str(session)],
                             input="a\nb\nc\nd\n", env={"KIMIK3_HOME": str(tmp_path / "home")})
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[:4] == [
        "[turn 1] answer: one", "[turn 1] answer: two", "[turn 1] answer: three",
        "the chat's --max-usd $0.0600 is spent ($0.0720); start a new chat to go on"]
    costs = [r.cost for r in read_session_records(session) if r.cost is not None]
    assert costs == [pytest.approx(0.024)] * 3


def test_a_failed_chat_turns_recorded_calls_count_toward_the_chats_cap(tmp_path: Path) -> None:
    # the first message's call (69 completion tokens at $1000/M = $0.069) is recorded, then the
    # turn fails (the script is used up): what it spent still counts, the second message is not sent
    from click.testing import CliRunner

    from kimik3.cli import main

    call = render_output({"reasoning_content": "look", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "read_file", "arguments": {"path": "a"}}}]})
    script = tmp_path / "s.json"
    script.write_text(json.dumps([call]))
    session = tmp_path / "c.jsonl"
    out = CliRunner().invoke(main, ["chat", "--script", str(script), "--price", "0,0,1000", "--max-usd", "0.02",
                                    "--plain", "--session", str(session)],
                             input="a\nb\n", env={"KIMIK3_HOME": str(tmp_path / "home")})
    assert out.exit_code == 1
    assert out.output.splitlines()[2:4] == [
        "error: EngineError: ScriptedEngine ran out of responses after 1 call(s)",
        "the chat's --max-usd $0.0200 is spent ($0.0690); start a new chat to go on"]
    assert [r.cost for r in read_session_records(session) if r.cost is not None] == [pytest.approx(0.069)]


def test_a_failed_chat_turns_sub_agent_costs_count_toward_the_chats_cap(tmp_path: Path) -> None:
    # a variant (a40c): the first message's task call ($0.087) starts a sub-agent ($0.061, in its own
    # session file), then the turn fails: the child's cost is the chat's too, so under a $0.10 cap
    # the second message is not sent (it was: $0.087 counted)
    from click.testing import CliRunner

    from kimik3.cli import main

    call = render_output({"reasoning_content": "", "content": "", "tool_calls": [
        {"id": "t1", "function": {"name": "task", "arguments": {"description": "d", "prompt": "p"}}}]})
    script = tmp_path / "s.json"
    script.write_text(json.dumps([call, render_output({"content": "done " * 30})]))
    (tmp_path / "ws").mkdir()
    session = tmp_path / "c.jsonl"
    out = CliRunner().invoke(main, ["chat", "-w", str(tmp_path / "ws"), "--sandbox", "none", "--script", str(script),
                                    "--price", "0,0,1000", "--max-usd", "0.1", "--plain", "--session", str(session)],
                             input="a\nb\n", env={"KIMIK3_HOME": str(tmp_path / "home")})
    assert out.exit_code == 1
    assert out.output.splitlines()[3:5] == [
        "error: EngineError: ScriptedEngine ran out of responses after 2 call(s)",
        "the chat's --max-usd $0.1000 is spent ($0.1480); start a new chat to go on"]
    child = next(tmp_path.glob("c.task-1-*.jsonl"))
    assert [r.cost for r in read_session_records(child) if r.cost is not None] == [pytest.approx(0.061)]
