"""``python -m kimik3.demo``: render a K3 prompt (placeholder main job until the agent lands)."""

from __future__ import annotations

from .formats.k3 import render


def main() -> None:
    """Print the K3 prompt for a one-message conversation with one tool."""
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    print(render([{"role": "user", "content": "What is in notes.txt?"}], tools))


if __name__ == "__main__":
    main()
