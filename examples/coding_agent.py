"""A K3 coding agent in a workspace: `kimik3 run` as a script to copy.

It takes the CLI's engine and model options (`python examples/coding_agent.py --help`) and builds
the engine and agent the CLI's way (`kimik3.cli.build_engine` / `build_agent`, with the full coding
harness: `kimik3.harness.CodingHarness`); errors are one line on stderr (exit 1), as with
`kimik3 run`. From the repository root:

    # k3-tiny embedded with vLLM on this machine (what `make demo` runs)
    python examples/coding_agent.py "What are the first lines of notes.txt and server.cfg?" examples/sample_workspace \
        --model-path models/k3-tiny --trust-remote-code --enforce-eager --max-model-len 8192 --temperature 0
    # an OpenAI-compatible endpoint serving K3 (e.g. `kimik3 serve models/k3-tiny --max-model-len 8192`)
    python examples/coding_agent.py "Which file mentions tokenizer?" examples/sample_workspace \
        --base-url http://127.0.0.1:8000/v1 --temperature 0

The engine also comes from the environment: KIMIK3_BASE_URL (+ KIMIK3_API_KEY, KIMIK3_MODEL) or
KIMIK3_MODEL_PATH.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from kimik3 import Agent, Engine
from kimik3.agents import FinalEvent, ToolCallDone, ToolResultEvent
from kimik3.cli import build_agent, build_engine, engine_options, run_script, start_engine
from kimik3.harness import CodingHarness


async def main(task: str, engine: Engine, agent: Agent[str], options: dict[str, Any] | None = None) -> int:
    """Run ``agent`` on ``task``, printing tool calls, results and the answer; 0 when it ran."""
    async with engine:  # closes it (and vLLM) at the end
        await start_engine(engine, options or {})
        async for event in agent.run_stream(task):
            if isinstance(event, ToolCallDone):
                print(f"tool {event.name} {event.arguments_json}", flush=True)
            elif isinstance(event, ToolResultEvent):
                first = event.result.text.splitlines()[0][:100] if event.result.text else ""
                print(f"  -> {first}", flush=True)
            elif isinstance(event, FinalEvent):
                r = event.result
                turns = f"{r.turns} turn{'' if r.turns == 1 else 's'}"
                print(f"\n{r.output}\n[{r.stop_reason}, {turns}, {r.usage.total_tokens} tokens]")
    return 0


@click.command()
@click.argument("task")
@click.argument("workspace", default=".", type=click.Path(exists=True, file_okay=False))
@engine_options
def cli(task: str, workspace: str, **options: Any) -> None:
    """Run the coding agent on TASK in WORKSPACE (default: the current directory)."""
    engine = build_engine(options)
    agent = build_agent(options, engine, *CodingHarness(workspace).parts(engine=engine))  # tools, instructions, hooks
    sys.exit(run_script(lambda: main(task, engine, agent, options)))


if __name__ == "__main__":  # required: an embedded vLLM starts processes that re-import this file
    cli()
