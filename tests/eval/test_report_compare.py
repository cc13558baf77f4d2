"""The report (markdown, self-contained HTML with its plot, every task text escaped) and
``compare``: per-task changes, deltas, the confidence note and the regression gate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3.cli import main
from kimik3.eval import AttemptResult, ResultsDir, compare, render_html, render_markdown, summarize

HOSTILE = '<script>alert("x")</script> | a&b'


def results(rates: dict[str, list[bool]], cost: float | None = 0.01) -> list[AttemptResult]:
    return [AttemptResult(task=name, attempt=i + 1, passed=p, stop_reason="completed", turns=2, cost=cost,
                          prompt_tokens=100, cached_tokens=50, tool_calls=2, valid_tool_calls=2,
                          tags=[HOSTILE] if name == "t1" else [])
            for name, outcome in rates.items() for i, p in enumerate(outcome)]


def write(folder: Path, items: list[AttemptResult], digest: str = "d1", sandbox: str | None = None) -> Path:
    with ResultsDir(folder, {"suite": "s", "suite_digest": digest, "sandbox": sandbox}) as out:
        for r in items:
            out.append(r)
    return folder


def test_the_html_report_is_self_contained_and_escapes_every_task_text() -> None:
    summary = summarize(results({"t1": [True, False], HOSTILE: [True, True], "t3": [False, False]}),
                        {"suite": HOSTILE, "model": "<m>"})
    page = render_html(summary)
    assert "<script" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; | a&amp;b" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    assert page.count("<svg") == 1
    # one pass-rate bar per task, 220 px for 100%; cost bars relative to the costliest task
    assert re.findall(r'class="pass"', page) and re.findall(r'width="([0-9.]+)" height="14" class="pass"', page) == [
        "220.0", "110.0", "0.0"]
    assert re.findall(r'width="([0-9.]+)" height="14" class="cost"', page) == ["220.0", "220.0", "220.0"]
    md = render_markdown(summary)
    assert "<" not in md and "&lt;script&gt;alert(\"x\")&lt;/script&gt; \\| a&amp;b |" in md  # raw HTML is text
    assert "| 2/2 | 100.0% |" in md and "| t3 |  | 0/2 | 0.0% |" in md
    assert "pass@1 50.0%, pass@2 66.7%" in md  # (1/2 + 1 + 0) / 3 and (1 + 1 + 0) / 3


def test_compare_names_changes_deltas_and_the_sign_test(tmp_path: Path) -> None:
    a = write(tmp_path / "a", results({"t1": [True, True], "t2": [True, True], "t3": [True, False], "t4": [False, False],
                                       "old": [True]}))
    b = write(tmp_path / "b", results({"t1": [False, False], "t2": [True, False], "t3": [True, True],
                                       "t4": [False, False], "new": [False]}, cost=0.02))
    c = compare(a, b, max_drop=0.1)
    assert c.tasks == [("t1", 1.0, 0.0), ("t2", 1.0, 0.5), ("t3", 0.5, 1.0), ("t4", 0.0, 0.0)]
    assert c.only_a == ["old"] and c.only_b == ["new"] and c.same_suite
    assert c.drop == pytest.approx(5 / 8 - 3 / 8) and c.regressed
    assert c.worse == ["t1", "t2"] and c.better == ["t3"] and c.p_value == pytest.approx(1.0)  # 2 vs 1
    lines = c.lines()
    assert lines[:3] == ["broke   t1: 100% -> 0%", "worse   t2: 100% -> 50%", "better  t3: 50% -> 100%"]
    assert "pass_rate: 62.5% -> 37.5% (-25.0%)" in lines
    assert "cost_per_pass: 0.0160 -> 0.0533 (+0.0373)" in lines
    assert lines[-2].startswith("95% Wilson intervals: A 30.6%-86.3%, B 13.7%-69.4%; exact sign test over the 3 tasks")
    assert lines[-1] == "REGRESSION: B's pass rate is -25.0% against A's (allowed drop 10.0%) over 4 common tasks"
    assert not compare(a, b, max_drop=0.25).regressed


def test_eval_compare_exits_1_on_a_regression(tmp_path: Path) -> None:
    a = write(tmp_path / "a", results({"t1": [True], "t2": [True]}))
    b = write(tmp_path / "b", results({"t1": [True], "t2": [False]}), digest="d2")
    r = CliRunner().invoke(main, ["eval", "compare", str(a), str(b), "--max-drop", "0.4"])
    assert r.exit_code == 1, r.output
    assert r.output.splitlines()[0] == "note: A and B ran different versions of the suite (digests differ)"
    assert r.output.splitlines()[-1].startswith("REGRESSION: B's pass rate is -50.0%")
    r = CliRunner().invoke(main, ["eval", "compare", str(a), str(b), "--max-drop", "0.5"])
    assert r.exit_code == 0 and r.output.splitlines()[-1].startswith("ok: ")
    r = CliRunner().invoke(main, ["eval", "compare", str(a), str(tmp_path)])
    assert r.exit_code == 1 and "holds no results.jsonl" in r.output


def test_summary_json_round_trips(tmp_path: Path) -> None:
    summary = summarize(results({"t1": [True, False]}))
    assert json.loads(json.dumps(summary)) == summary


def test_compare_notes_runs_in_different_sandboxes_and_the_report_names_its_own(tmp_path: Path) -> None:
    bwrap = "sandbox: bwrap (workspace read-write, the rest read-only, home hidden, network off)"
    none = "sandbox: none (commands run unsandboxed, with your rights)"
    a = write(tmp_path / "a", results({"t1": [True]}), sandbox=bwrap)
    b = write(tmp_path / "b", results({"t1": [True]}), sandbox=none)
    assert compare(a, b).lines()[0] == f"note: A and B ran in different sandboxes (A {bwrap}; B {none})"
    assert not compare(a, a).lines()[0].startswith("note:")
    summary = summarize(results({"t1": [True]}), {"sandbox": bwrap})
    assert "| sandbox | bwrap (workspace read-write, the rest read-only, home hidden, network off) |" in \
        render_markdown(summary)
    assert "<tr><th>sandbox</th><td>none (commands run unsandboxed, with your rights)</td></tr>" in render_html(
        summarize(results({"t1": [True]}), {"sandbox": none}))


def test_an_unchanged_pass_rate_and_a_change_below_the_shown_digits_are_never_minus_zero(tmp_path: Path) -> None:
    # issue 43: "B's pass rate is -0.0%" for the same results
    same = {"t1": [True, False], "t2": [True, True]}
    a = write(tmp_path / "a", results(same))
    b = write(tmp_path / "b", results(same))
    lines = compare(a, b, max_drop=0.1).lines()
    assert "pass_rate: 75.0% -> 75.0% (±0.0%)" in lines
    assert "cost_per_pass: 0.0133 -> 0.0133 (±0.0000)" in lines
    assert lines[-1] == "ok: B's pass rate is ±0.0% against A's (allowed drop 10.0%) over 2 common tasks"
    from kimik3.eval._compare import signed

    assert [signed(v, ".1%") for v in (-0.0004, 0.0004, -0.0, 0.0, -0.25, 0.0006)] == [
        "±0.0%", "±0.0%", "±0.0%", "±0.0%", "-25.0%", "+0.1%"]
def test_the_markdown_report_shows_a_task_text_literally_never_as_markup() -> None:
    # issue 40: raw HTML in report.md; variants: an image (fetched on view), a link, emphasis, a
    # terminal escape, a cell break
    name = "<img src=http://evil/x.png> ![p](http://evil/p.png) [l](http://evil) **b** `c` \x1b[31mred|x"
    summary = summarize(results({name: [True]}), {"suite": "s", "model": "m"})
    md = render_markdown(summary)
    row = next(line for line in md.splitlines() if "evil/x.png" in line)
    assert row.startswith("| &lt;img src=http://evil/x.png&gt; \\!\\[p\\](http://evil/p.png) \\[l\\](http://evil) "
                          "\\*\\*b\\*\\* \\`c\\` red\\|x |")
    assert "\x1b" not in md and "<img" not in md


def test_a_task_name_with_a_newline_stays_in_its_row_and_its_compare_line(tmp_path: Path) -> None:
    # a variant of issue 40's raw HTML (a40c): a task name holding a newline, a table row of its
    # own and a bidi override; report.md keeps it in one cell, `eval compare` on one line
    name = "t\n| forged | 1 | 1/1 | 100.0% |\u202e"
    md = render_markdown(summarize(results({name: [True]}), {"suite": "s", "model": "m"}))
    rows = [line for line in md.splitlines() if "forged" in line]
    assert rows == ["| t \\| forged \\| 1 \\| 1/1 \\| 100.0% \\| |  | 1/1 | 100.0% | $0.0100 | 2.0 | 0 | 0 |"]
    a = write(tmp_path / "a", results({name: [False], "u": [True]}))
    b = write(tmp_path / "b", results({name: [True], "u": [True]}))
    out = CliRunner().invoke(main, ["eval", "compare", str(a), str(b)])
    assert [line for line in out.output.splitlines() if "forged" in line] == [
        "fixed   t\\u000a| forged | 1 | 1/1 | 100.0% |: 0% -> 100%"]
