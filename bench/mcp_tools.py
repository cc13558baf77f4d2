"""Benchmark opening an MCP server with many tools, and refetching its list (issue 26, item 4).

A hand-written stdio server (tests/tools/mcp_raw_server.py) lists N tools, each with a small
schema; kimik3 opens it (handshake and first listing: the SDK's parsing and kimik3's tools),
then the server announces a change and the agent's next turn refetches the list. Measured: this
process's CPU time (process_time: the server is another process), min / median / max of 3
repeats, and the ratio of the minimums (the least disturbed run) to N = 2,000 in the same run. Linear scaling gives about 8x for 16,000
(before issue 26: 1.6 s and 16.8 s to open, part of it a quadratic name check, on the loop).

Run: .venv/bin/python bench/mcp_tools.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3.agents._dynamic import Toolbox  # noqa: E402
from kimik3.tools.mcp import MCPServerStdio  # noqa: E402

RAW = str(ROOT / "tests" / "tools" / "mcp_raw_server.py")
SIZES = (2000, 16000)
REPEATS = 3


def listing(n: int, extra: str) -> str:
    schema = '{"type":"object","properties":{"q":{"type":"string","pattern":"^[a-z]+$"}},"required":["q"]}'
    tools = [f'{{"name":"tool {i}{extra}","description":"tool number {i}","inputSchema":{schema}}}' for i in range(n)]
    return "[" + ",".join(['{"name":"swap","inputSchema":{"type":"object"}}', *tools]) + "]"


async def once(n: int, directory: Path) -> tuple[float, float]:
    """CPU seconds to open a server of ``n`` tools, and to refetch its changed list."""
    lists = directory / f"lists-{n}.txt"
    lists.write_text(listing(n, "") + "\n" + listing(n, " v2") + "\n", encoding="utf-8")
    server = MCPServerStdio(sys.executable, [RAW, str(lists)], name="many", mode="legacy", timeout=600)
    toolbox = Toolbox([server])
    start = time.process_time()
    async with server:
        table, _ = await toolbox.current()
        opened = time.process_time() - start
        await table["swap"].run({})
        await anyio.sleep(0.2)  # the list_changed notification arrives
        start = time.process_time()
        table, _ = await toolbox.current()
        refetched = time.process_time() - start
    assert len(table) == n + 1 and "tool_0_v2" in table, sorted(table)[:3]
    return opened, refetched


async def main() -> None:
    results: dict[int, list[tuple[float, float]]] = {n: [] for n in SIZES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(REPEATS):
            for n in SIZES:  # interleaved: the machine's load hits both alike
                results[n].append(await once(n, Path(tmp)))
    base = {what: min(r[what] for r in results[SIZES[0]]) for what in (0, 1)}
    print(f"{'tools':>6}  {'open CPU s (min/med/max)':>26}  ratio  {'refetch CPU s (min/med/max)':>29}  ratio")
    for n in SIZES:
        cells = []
        for what in (0, 1):
            xs = sorted(r[what] for r in results[n])
            cells.append(f"{xs[0]:7.2f} {statistics.median(xs):7.2f} {xs[-1]:7.2f}  {xs[0] / base[what]:5.1f}x")
        print(f"{n:>6}  {cells[0]:>33}  {cells[1]:>36}")


if __name__ == "__main__":
    anyio.run(main)
