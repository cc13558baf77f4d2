"""``python -m kimik3``: the ``kimik3`` command (see :mod:`kimik3.cli`)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main(prog_name="kimik3")
