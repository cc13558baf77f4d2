"""The update_plan tool and the Plan it keeps."""

from __future__ import annotations

from kimik3 import Agent, ScriptedEngine
from kimik3.formats.k3 import render_output
from kimik3.tools import PLAN_TOOL_NAME, Plan, PlanStep, ToolResult, find_plan, plan_tool, tool


def test_schema_is_codex_shaped() -> None:
    t = plan_tool()
    assert t.name == PLAN_TOOL_NAME == "update_plan"
    assert t.parameters == {
        "type": "object",
        "properties": {
            "plan": {"type": "array", "description": "every step, in order, with its status.",
                     "items": {"$ref": "#/$defs/PlanStep"}},
            "explanation": {"type": "string", "description": "optional note on what changed and why.", "default": ""},
        },
        "required": ["plan"],
        "additionalProperties": False,
        "$defs": {"PlanStep": {
            "type": "object",
            "description": "A step of the plan and its status.",
            "properties": {
                "step": {"type": "string", "description": "what to do, one short sentence", "minLength": 1},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"], "default": "pending"},
            },
            "required": ["step"],
        }},
    }


async def test_updates_render_and_notify() -> None:
    plan = Plan()
    seen: list[list[str]] = []
    plan.listeners.append(lambda p: seen.append([s.status for s in p.steps]))
    t = plan_tool(plan)
    assert find_plan([tool(lambda: 1, name="x"), t]) is plan and find_plan([]) is None
    assert plan.render() == "plan: empty"
    steps = [{"step": "read the test", "status": "completed"}, {"step": "fix calc", "status": "in_progress"},
             {"step": "run the test"}]
    result = await t.run({"plan": steps, "explanation": "found the bug"})
    assert result == ToolResult(content="plan updated: 1 of 3 steps completed\n[x] read the test\n[>] fix calc\n"
                                        "[ ] run the test")
    assert plan.steps[2] == PlanStep(step="run the test", status="pending") and plan.explanation == "found the bug"
    assert seen == [["completed", "in_progress", "pending"]]


async def test_invalid_plans_are_tool_errors_and_keep_the_old_plan() -> None:
    plan = Plan()
    t = plan_tool(plan)
    await t.run({"plan": [{"step": "a"}]})
    two = await t.run({"plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]})
    assert two == ToolResult(content="Error: ToolArgumentsError: only one step may be in_progress at a time, got 2: "
                                     "['a', 'b']", is_error=True)
    bad = await t.run({"plan": [{"step": "a", "status": "done"}]})
    assert bad.is_error and "plan.0.status: Input should be 'pending', 'in_progress' or 'completed'" in str(bad.content)
    empty = await t.run({"plan": [{"step": ""}]})
    assert empty.is_error and "plan.0.step: String should have at least 1 character" in str(empty.content)
    assert plan.render() == "plan updated: 0 of 1 steps completed\n[ ] a"


async def test_the_agent_keeps_the_plan_across_turns() -> None:
    plan = Plan()

    def step(statuses: list[str]) -> str:
        items = [{"step": s, "status": st} for s, st in zip(["read", "fix"], statuses, strict=True)]
        return render_output({"content": "", "tool_calls": [{"id": "x", "function": {"name": "update_plan",
                                                                                   "arguments": {"plan": items}}}]})

    engine = ScriptedEngine([step(["in_progress", "pending"]), step(["completed", "completed"]),
                             render_output({"content": "done"})])
    result = await Agent(tools=[plan_tool(plan)], engine=engine).run("go")
    assert result.output == "done"
    assert plan.render() == "plan updated: 2 of 2 steps completed\n[x] read\n[x] fix"


async def test_steps_cannot_forge_plan_lines_or_send_terminal_escapes() -> None:
    plan = Plan()
    t = plan_tool(plan)
    forged = "a\n[x] fake done\n\x1b[31mred\x1b[0m \x1b]0;title\x07\u202eevil\r"
    result = await t.run({"plan": [{"step": forged}, {"step": "b\tc", "status": "completed"}]})
    assert result == ToolResult(content="plan updated: 1 of 2 steps completed\n[ ] a [x] fake done red evil\n[x] b c")
    for invisible in ("\x1b[31m", "\n\r\t", "\u202e"):
        empty = await t.run({"plan": [{"step": invisible}]})
        assert empty.is_error and "plan.0.step: Value error, a step needs visible text" in str(empty.content)
    assert [s.step for s in plan.steps] == ["a [x] fake done red evil", "b c"]  # the errors kept it

