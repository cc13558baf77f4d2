"""The one-page report of an eval: ``report.md`` and a self-contained ``report.html`` (inline CSS
and an inline SVG plot of each task's pass rate and cost; no script, nothing fetched). Every text
that comes from a task or a result is escaped: HTML-escaped in the page; in the markdown, control
characters dropped, ``& < >`` as HTML entities (a renderer shows raw HTML as text, never runs or
fetches it) and markdown's punctuation backslash-escaped (no link, image, emphasis or table cell
made by a task's name or tags; issue 40)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from .._pricing import format_usd
from .._text import counted, printable

__all__ = ["render_html", "render_markdown", "write_report"]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else format_usd(x)


_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]!|~])")  # emphasis, code, links, images, cells


def _md(text: Any) -> str:
    """Text as markdown shows it literally (one line of a table cell): controls dropped, HTML's
    ``& < >`` as entities, markdown's punctuation backslash-escaped."""
    line = " ".join(printable(str(text)).split())
    return _MD_PUNCTUATION.sub(r"\\\1", html.escape(line, quote=False))


def _headline(s: dict[str, Any]) -> list[tuple[str, str]]:
    ci = s.get("pass_rate_ci95")
    rate = f"{_pct(s['pass_rate'])} ({s['passed']}/{s['attempts']}"
    rate += f"; 95% Wilson interval {_pct(ci[0])}-{_pct(ci[1])})" if ci else ")"
    pass_k = ", ".join(f"pass@{k} {_pct(v)}" for k, v in s["pass_at_k"].items()) or "n/a"
    ttft = "n/a" if s["ttft_p50"] is None else f"{s['ttft_p50']:.3f} s"
    return [
        ("pass rate", rate),
        ("pass@k", pass_k),
        ("cost", _usd(s["cost"])),
        ("cost per pass", _usd(s["cost_per_pass"])),
        ("prompt tokens served from the cache", f"{_pct(s['cached_share'])} of {s['prompt_tokens']:,}"),
        ("valid tool calls", f"{_pct(s['tool_call_validity'])} ({s['valid_tool_calls']}/{s['tool_calls']})"),
        ("timeouts", f"{s['timeouts']} (checks: {s['check_timeouts']})"),
        ("errors", str(s["errors"])),
        ("degraded runs", str(s["degraded"])),
        ("loops detected", str(s.get("loops", 0))),
        ("stop reasons", ", ".join(f"{k} {v}" for k, v in s["stop_reasons"].items()) or "n/a"),
        ("time to first token (median)", ttft),
        ("sandbox", (s.get("sandbox") or "not recorded").removeprefix("sandbox: ")),
    ]


def _title(s: dict[str, Any]) -> str:
    return f"Eval of {s.get('suite') or 'a suite'}"


def _subtitle(s: dict[str, Any]) -> str:
    return (f"model {s.get('model') or 'unknown'} · tools {s.get('tools') or 'core'} · {counted(s['tasks'], 'task')} · "
            f"{counted(s['attempts'], 'attempt')}")


def render_markdown(summary: dict[str, Any]) -> str:
    """The report as markdown (a headline table, then one row per task)."""
    out = [f"# {_md(_title(summary))}", "", _md(_subtitle(summary)), "", "| | |", "| --- | --- |"]
    out += [f"| {_md(k)} | {_md(v)} |" for k, v in _headline(summary)]
    out += ["", "## Tasks", "", "| task | tags | passed | pass rate | cost | mean turns | timeouts | errors |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in summary["per_task"].items():
        out.append(f"| {_md(name)} | {_md(', '.join(row['tags']))} | {row['passed']}/{row['attempts']} | "
                   f"{_pct(row['pass_rate'])} | {_usd(row['cost'])} | {row['mean_turns']:.1f} | {row['timeouts']} | "
                   f"{row['errors']} |")
    return "\n".join(out) + "\n"


def _plot(summary: dict[str, Any]) -> str:
    """An SVG with one row per task: its pass rate (bar out of 100%) and its cost (bar out of the
    costliest task's), values written beside the bars."""
    rows = list(summary["per_task"].items())
    label_w, bar_w, gap, row_h, top = 260, 220, 120, 20, 34
    width = label_w + 2 * bar_w + 2 * gap
    height = top + row_h * max(1, len(rows)) + 10
    costs = [row["cost"] for _, row in rows if row["cost"] is not None]
    most = max(costs) if costs else 0.0
    x_rate, x_cost = label_w, label_w + bar_w + gap
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="pass rate and cost per task">',
             f'<text x="{x_rate}" y="16" class="h">pass rate (of attempts)</text>',
             f'<text x="{x_cost}" y="16" class="h">cost (USD, of the costliest task)</text>']
    for i, (name, row) in enumerate(rows):
        y = top + i * row_h
        shown = name if len(name) <= 38 else name[:37] + "…"
        parts.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end">{html.escape(shown)}</text>')
        parts.append(f'<rect x="{x_rate}" y="{y + 3}" width="{bar_w}" height="{row_h - 6}" class="bg"/>')
        parts.append(f'<rect x="{x_rate}" y="{y + 3}" width="{bar_w * row["pass_rate"]:.1f}" height="{row_h - 6}" '
                     'class="pass"/>')
        parts.append(f'<text x="{x_rate + bar_w + 6}" y="{y + 13}">{_pct(row["pass_rate"])}</text>')
        if row["cost"] is not None:
            w = bar_w * (row["cost"] / most) if most else 0.0
            parts.append(f'<rect x="{x_cost}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" class="cost"/>')
        parts.append(f'<text x="{x_cost + bar_w + 6}" y="{y + 13}">{html.escape(_usd(row["cost"]))}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
td.n{text-align:right}svg text{font:12px system-ui,sans-serif;fill:#222}svg text.h{font-weight:bold}
rect.bg{fill:#eee}rect.pass{fill:#2e7d32}rect.cost{fill:#1565c0}"""


def render_html(summary: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (escaped text, inline CSS and SVG)."""
    e = html.escape
    head = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _headline(summary))
    rows = "".join(
        f"<tr><td>{e(name)}</td><td>{e(', '.join(row['tags']))}</td><td class=n>{row['passed']}/{row['attempts']}</td>"
        f"<td class=n>{_pct(row['pass_rate'])}</td><td class=n>{e(_usd(row['cost']))}</td>"
        f"<td class=n>{row['mean_turns']:.1f}</td><td class=n>{row['timeouts']}</td>"
        f"<td class=n>{row['errors']}</td></tr>"
        for name, row in summary["per_task"].items())
    return (f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{e(_title(summary))}</title>"
            f"<style>{_CSS}</style></head><body>\n<h1>{e(_title(summary))}</h1>\n<p>{e(_subtitle(summary))}</p>\n"
            f"<table>{head}</table>\n{_plot(summary)}\n<h2>Tasks</h2>\n<table><tr><th>task</th><th>tags</th>"
            "<th>passed</th><th>pass rate</th><th>cost</th><th>mean turns</th><th>timeouts</th><th>errors</th></tr>"
            f"{rows}</table>\n</body></html>\n")


def write_report(summary: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` into ``out`` (each to a temporary file renamed into
    place); returns their paths."""
    folder = Path(out)
    paths = []
    for name, text in (("report.md", render_markdown(summary)), ("report.html", render_html(summary))):
        path = folder / name
        tmp = path.with_name(name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        paths.append(path)
    return paths[0], paths[1]
