"""Evals: run a suite of coding tasks through the harness, score pass rate and cost per
successful task, compare two runs (a regression gate for runtime upgrades), and replay recorded
model requests against an endpoint (the Vendor Verifier's tool-call evaluation).

::

    import anyio
    from kimik3 import RemoteEngine
    from kimik3.eval import EvalConfig, evaluate, load_suite

    suite = load_suite("evals/k3-tiny")
    engine = RemoteEngine(base_url="http://127.0.0.1:8000/v1")
    summary = anyio.run(lambda: evaluate(suite, engine, "runs/k3-tiny", repeat=3, concurrency=4))
    print(summary["pass_rate"], summary["pass_at_k"], summary["cost_per_pass"])

Modules: :mod:`._suite` (the suite format: ``task.toml``), :mod:`._workspace` (an attempt's
fresh directory, ``setup`` / ``check`` commands in a sandbox), :mod:`._runner` (attempts, concurrency,
resuming), :mod:`._results` (``results.jsonl``), :mod:`._summary`, :mod:`._stats` (pass@k,
Wilson, sign test), :mod:`._report` (markdown and HTML), :mod:`._compare`, :mod:`._replay`,
:mod:`._validity` (tool calls against their schemas), :mod:`._timing` (time to first token).
The command line is ``kimik3 eval`` (``kimik3/cli/eval.py``).
"""

from .._exceptions import EvalError
from ._compare import Comparison, compare
from ._replay import RecordedRequest, ReplayRow, recorded_requests, replay, replay_summary
from ._report import render_html, render_markdown, write_report
from ._results import AttemptResult, ResultsDir, read_results
from ._runner import EvalConfig, evaluate, run_attempt, run_suite, write_summary
from ._stats import pass_at_k, sign_test, wilson_interval
from ._suite import EvalTask, Suite, load_suite
from ._summary import summarize
from ._timing import TimedClient
from ._validity import call_problem

__all__ = [
    "AttemptResult",
    "Comparison",
    "EvalConfig",
    "EvalError",
    "EvalTask",
    "RecordedRequest",
    "ReplayRow",
    "ResultsDir",
    "Suite",
    "TimedClient",
    "call_problem",
    "compare",
    "evaluate",
    "load_suite",
    "pass_at_k",
    "read_results",
    "recorded_requests",
    "render_html",
    "render_markdown",
    "replay",
    "replay_summary",
    "run_attempt",
    "run_suite",
    "sign_test",
    "summarize",
    "wilson_interval",
    "write_report",
    "write_summary",
]
