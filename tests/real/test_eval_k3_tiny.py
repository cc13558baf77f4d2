"""The shipped suite ``evals/k3-tiny`` run by ``kimik3 eval`` on the embedded k3-tiny (one vLLM
engine, started once by the command): the tasks the model does not know fail by their checks,
nothing errs or times out, and ``summary.json`` is exactly what ``results.jsonl`` adds up to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kimik3.agents import read_session_records
from kimik3.eval import load_suite, read_results, summarize
from kimik3.types import AssistantMessage

from .conftest import K3_TINY, ROOT, require_engine

SUITE = ROOT / "evals" / "k3-tiny"


def test_the_shipped_suite_on_the_embedded_engine(tmp_path: Path) -> None:
    require_engine("VLLMEngine", K3_TINY)
    suite = load_suite(SUITE)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kimik3", "eval", str(SUITE), "--out", str(out), "--model-path", str(K3_TINY),
           "--trust-remote-code", "--max-model-len", "8192", "--enforce-eager", "--temperature", "0",
           "--concurrency", "2", "--plain"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "KIMIK3_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results, _ = read_results(out / "results.jsonl")
    by_task = {r.task: r for r in results}
    assert sorted(by_task) == [t.name for t in suite.tasks] and len(results) == len(suite.tasks)
    # honest structure: no attempt errs or times out; what the model does not know fails by its check
    assert {r.stop_reason for r in results} <= {"completed", "turn_budget", "unusable_output", "no_progress"}
    unknown = [t.name for t in suite.tasks if "unknown" in t.tags]
    assert unknown and all(not by_task[n].passed and by_task[n].check_exit not in (0, None) for n in unknown)
    known = [r for r in results if "unknown" not in r.tags]
    assert sum(r.passed for r in known) / len(known) >= 0.6, [r.task for r in known if not r.passed]
    # every line's numbers are its session's
    for r in results:
        assert r.session is not None
        records = read_session_records(out / r.session)
        turns = [x for x in records if isinstance(x.message, AssistantMessage) and x.usage is not None]
        assert len(turns) == r.turns
        assert sum(x.usage.prompt_tokens for x in turns if x.usage) == r.prompt_tokens
        assert r.cached_tokens == sum(x.usage.cached_tokens for x in turns if x.usage)  # vLLM reports its cache
        assert r.ttft_p50 is not None and r.ttft_p50 > 0
    # the summary is the lines' sum, and the plain output says the same
    summary = json.loads((out / "summary.json").read_text())
    meta = json.loads((out / "eval.json").read_text())
    assert summary == json.loads(json.dumps(summarize(results, meta)))
    assert summary["passed"] == sum(r.passed for r in results) and summary["attempts"] == len(results)
    assert summary["cached_share"] is not None and summary["cached_share"] > 0.5  # one engine's prefix cache
    lines = proc.stdout.splitlines()
    assert lines[0] == meta["sandbox"] and lines[0].startswith("sandbox: ")  # which sandbox ran the commands
    assert lines[1] == f"starting vLLM with {K3_TINY} ..." and len(lines) == 2 + len(results) + 3
    assert lines[-3].startswith(f"pass rate: {summary['pass_rate']:.1%} ({summary['passed']}/{len(results)} attempts")
    assert load_suite(SUITE).digest == suite.digest  # the suite was only read
