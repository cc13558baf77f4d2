"""The CLI's engine, agent and error handling for scripts (examples/coding_agent.py): build what
``kimik3 run`` builds from the same click options (:func:`kimik3.cli.engine_options`)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from ..agents import Agent, RunHooks
from ..engines import Engine
from ..tools import Tool, Toolset
from .engine import agent_from, engine_from, options_from, quiet
from .progress import PlainProgress
from .run import execute, start_embedded

__all__ = ["build_agent", "build_engine", "run_script", "start_engine"]


def build_engine(options: Mapping[str, Any]) -> Engine:
    """The engine ``kimik3 run`` builds, from the keyword arguments of a click command decorated
    with :func:`engine_options` (call it inside that command). Not started: see :func:`start_engine`.
    Hides vLLM's logs and Python warnings unless ``--verbose``.

    Raises:
        click.UsageError: no engine, two engines, options of another engine, raw mode without
            a tokenizer.
    """
    o = options_from(dict(options))
    quiet(o.verbose)
    return engine_from(o)


def build_agent(options: Mapping[str, Any], engine: Engine, tools: Sequence[Tool | Toolset], instructions: str | None,
                hooks: Sequence[RunHooks] = ()) -> Agent[str]:
    """The agent ``kimik3 run`` builds: ``engine`` with the options' sampling settings
    (``--temperature``, ``--max-tokens``, ...) and turn budget (``--max-turns``); ``tools``,
    ``instructions`` and ``hooks`` as :meth:`kimik3.harness.CodingHarness.parts` gives them."""
    return agent_from(options_from(dict(options)), engine, tools, instructions, hooks)


async def start_engine(engine: Engine, options: Mapping[str, Any]) -> None:
    """Start an embedded engine now, as ``kimik3 run`` does (prints "starting vLLM ..."; vLLM's
    output goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log`` unless ``--verbose``); other
    engines need no start.

    Raises:
        EngineNotAvailableError: vLLM is not installed.
        EngineError: vLLM did not start (whatever vLLM raised, as one typed error).
    """
    await start_embedded(engine, PlainProgress(), bool(options.get("verbose")))


def run_script(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run ``main`` on an event loop as the CLI does: its return value is the exit code; a
    kimik3 (or OS) error is printed on stderr as one line ``error: <Type>: <message>`` (exit 1);
    Ctrl-C exits 130. Other exceptions propagate (a bug: the traceback is wanted)."""
    return execute(main, PlainProgress())


