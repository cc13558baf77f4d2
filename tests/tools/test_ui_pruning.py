"""Cache-stable screenshot pruning (ContextPolicy.max_images + image_slack), measured on the
prompts a ScriptedEngine really rendered."""

from __future__ import annotations

import itertools

from kimik3 import Agent, ContextPolicy, ScriptedEngine
from kimik3.tools.ui import ui_tools

from .test_ui import CanvasComputer, Script, answer, call


async def _prompts(max_images: int, slack: int | None) -> tuple[list[int], list[bool]]:
    script = Script([lambda shot: call("screenshot"), *[lambda shot, i=i: call("click", x=10 + i, y=10) for i in range(23)],
                     lambda shot: answer("done")])  # fmt: skip
    engine = ScriptedEngine(script)
    agent = Agent(engine=engine, tools=ui_tools(CanvasComputer((400, 300)), settle=0),
                  context=ContextPolicy(max_images=max_images, image_slack=slack))  # fmt: skip
    result = await agent.run("look")
    assert result.output == "done"
    prompts = [c.prompt for c in engine.calls]
    # a prompt "extends" the previous one when the previous one (without its generation prompt,
    # the assistant header rendered again in the next prompt) is its exact prefix
    extends = [b.startswith(a) for a, b in itertools.pairwise(prompts)]
    return script.images_per_call, extends


async def test_batched_pruning_keeps_the_prompt_prefix_stable() -> None:
    images, extends = await _prompts(3, None)
    assert len(images) == 25  # a screenshot, 23 clicks, the answer: 24 tool results
    # images grow to 6, then the oldest 4 go (down to 3) when the 7th arrives
    assert images == [0, 1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    assert max(images) == 6
    breaks = [i + 1 for i, ok in enumerate(extends) if not ok]
    assert breaks == [7, 11, 15, 19, 23]  # only the calls right after a batch was dropped
    assert sum(extends) / len(extends) >= 0.75  # 19 of 24


async def test_slack_zero_prunes_every_turn_and_breaks_the_prefix_each_time() -> None:
    images, extends = await _prompts(3, 0)
    assert images == [0, 1, 2, 3] + [3] * 21
    assert sum(extends) == 3  # only until the fourth image arrives
