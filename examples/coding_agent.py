"""A K3 coding agent in a workspace: `kimik3 run` as a script to copy.

    KIMIK3_BASE_URL=http://127.0.0.1:8000/v1 python examples/coding_agent.py "fix the failing test" path/to/repo

Engine from the environment: KIMIK3_BASE_URL (+ KIMIK3_API_KEY, KIMIK3_MODEL) for an
OpenAI-compatible endpoint serving K3, or KIMIK3_MODEL_PATH for K3 embedded with vLLM.
"""

from __future__ import annotations

import os
import sys

import anyio

from kimik3 import Agent, Engine, RemoteEngine, ToolCallDone, VLLMEngine
from kimik3.agents import CODING_INSTRUCTIONS, FinalEvent, ToolResultEvent
from kimik3.tools.coding import coding_tools


def make_engine() -> Engine:
    if os.environ.get("KIMIK3_MODEL_PATH"):
        return VLLMEngine(os.environ["KIMIK3_MODEL_PATH"])
    return RemoteEngine(base_url=os.environ["KIMIK3_BASE_URL"], api_key=os.environ.get("KIMIK3_API_KEY"),
                        model=os.environ.get("KIMIK3_MODEL"))


async def main(task: str, workspace: str) -> None:
    async with make_engine() as engine:
        agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=engine, max_turns=30)
        async for event in agent.run_stream(task):
            if isinstance(event, ToolCallDone):
                print(f"tool {event.name} {event.arguments_json}", flush=True)
            elif isinstance(event, ToolResultEvent):
                print(f"  -> {event.result.text.splitlines()[0][:100] if event.result.text else ''}", flush=True)
            elif isinstance(event, FinalEvent):
                print(f"\n{event.result.output}\n[{event.result.stop_reason}, {event.result.usage.total_tokens} tokens]")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ".")
