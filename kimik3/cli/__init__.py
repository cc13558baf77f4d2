"""The ``kimik3`` command: run the K3 coding agent, resume its sessions, chat, check a node.

::

    kimik3 run "fix the failing test" --workspace repo --base-url http://127.0.0.1:8000/v1
    kimik3 run "..." --model-path /models/kimi-k3 --preset auto             # embedded vLLM
    kimik3 run "..." --script replies.json                                  # scripted replies
    kimik3 resume ~/.kimik3/sessions/20260101-120000.jsonl "now add a test" --base-url ...
    kimik3 show SESSION                   # a session as a transcript, messages numbered
    kimik3 resume SESSION "try B" --at 7  # fork: continue from message 7 in a new session
    kimik3 approve SESSION --deny ID      # decide the calls a run deferred for approval, then resume
    kimik3 answer SESSION ID TEXT         # answer an MCP server's question a run stopped on, then resume
    kimik3 chat --base-url ...            # a REPL; --workspace DIR gives it the coding tools
    kimik3 preflight                      # can this node serve K3? (--preset NAME: env, command)
    kimik3 replay runs/form [--html run.html]   # replay a recorded UI trajectory, or render it
    kimik3 serve models/k3-tiny --max-model-len 8192   # vLLM's OpenAI server with the kimi_k3 parsers
    kimik3 serve models/k3-tiny --replicas 2 --router consistent_hash   # 2 replicas behind vllm-router
    kimik3 eval evals/k3-tiny --out runs/a --model-path models/k3-tiny   # a task suite: pass rate, cost
    kimik3 eval compare runs/a runs/b --max-drop 0.05                    # exit 1: b regressed

Progress goes to stdout. On a terminal it is live (rich): a status line (turn, tool calls,
tokens), reasoning dimmed, tool calls and results as they happen, the answer. Elsewhere (a pipe,
CI) it is plain, flushed lines whose format is kept stable::

    sandbox: bwrap (workspace read-write, the rest read-only, secrets hidden, /tmp private, network off)
                                            first: where bash runs commands (--sandbox)
    [turn 1] text: <content the model wrote beside its tool calls>
    [turn 1] tool read_file {"path": "notes.txt"}
    [turn 1] result read_file: <first non-blank line of the result, at most 100 chars>
    [turn 1] plan [>] <step>                 after an update_plan result (--plan), one per step
    [turn 2] answer: <the final answer>
    stopped: turn_budget (<why>)            only when the run did not complete
    usage: 2 turns, 1 tool call, 1234 tokens, 45% cached, $0.0123
    session: /home/me/.kimik3/sessions/20260101-120000.jsonl

The usage line gives the share of prompt tokens served from the engine's prefix cache only when
the engine reports it, and the USD cost only when the run is priced (Moonshot's hosted model ids,
``kimik3._pricing``, or ``--price``); the live view's status line shows both as the turns go. Tool arguments are
one-line JSON (``json.dumps``), cut after 200 characters with ``...``; the result preview
collapses whitespace and is cut after 100 characters with ``...``. A ``text`` line comes only
when the model wrote text beside its calls; the answer may span several lines.

vLLM's, torch's and Python's logs and warnings are hidden unless ``--verbose`` (what vLLM prints
while it starts goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log``). A session file, once
created, is never deleted: a run that fails or is interrupted (Ctrl-C) before the model answered
keeps the task in it, unanswered, and says how to continue it (``kimik3 resume SESSION -w DIR``).

Exit codes: 0 the run ended (answered, or stopped by a budget: said so), 1 an error (a kimik3
error is printed on stderr as one line ``error: <Type>: <message>``; ``chat`` goes on and exits
1 at the end), 2 a usage error, 130 interrupted. This is the only package of kimik3 that knows
about terminals.

One module per command or concern: :mod:`~kimik3.cli.run` (``run``, ``resume``, ``chat``),
:mod:`~kimik3.cli.sessions` (``show``, ``approve``, ``answer``, ``undo``), :mod:`~kimik3.cli.verify` (``preflight``,
``verify``), :mod:`~kimik3.cli.replay`, :mod:`~kimik3.cli.serve`, :mod:`~kimik3.cli.eval`; shared by them:
:mod:`~kimik3.cli.engine` (the engine and model options), :mod:`~kimik3.cli.recorded` (the engine
options a session records for its resume), :mod:`~kimik3.cli.harness` (the coding
harness's options), :mod:`~kimik3.cli.progress` (what a run prints); for scripts: :mod:`~kimik3.cli.scripts`.
"""

from __future__ import annotations

import click

from .. import __version__
from .engine import engine_options, parse_engine_arg
from .eval import eval_group
from .replay import replay_command
from .run import chat_command, resume_command, run_command
from .scripts import build_agent, build_engine, run_script, start_engine
from .serve import serve_command
from .sessions import answer_command, approve_command, show_command, undo_command
from .verify import preflight_command, verify_command

__all__ = ["build_agent", "build_engine", "engine_options", "main", "parse_engine_arg", "run_script", "start_engine"]


class _Main(click.Group):
    """The ``kimik3`` group: Ctrl-C in any command, also at a question (click's prompt makes it an
    ``Abort``), ends it as ``run`` does, ``interrupted`` on stderr and exit 130 (not click's
    ``Aborted!`` and 1; issue 40). An ``Abort`` of an ended input stays click's."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (KeyboardInterrupt, click.Abort) as e:
            if isinstance(e, click.Abort) and not isinstance(e.__context__, KeyboardInterrupt):
                raise
            click.echo("\ninterrupted" if isinstance(e, click.Abort) else "interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="kimik3")
def main() -> None:
    """kimik3: the Kimi K3 coding agent and tools on the command line.

    Pick an engine with --base-url (an OpenAI-compatible endpoint serving K3), --model-path
    (K3 embedded with vLLM) or --script (scripted replies, for tests and dry runs).
    """


for _command in (run_command, resume_command, chat_command, preflight_command, show_command, replay_command,
                 verify_command, undo_command, approve_command, answer_command, eval_group, serve_command):
    main.add_command(_command)
