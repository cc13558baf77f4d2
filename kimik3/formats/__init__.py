"""Wire formats. :mod:`kimik3.formats.k3` speaks Kimi K3's XTML format (pure functions, no I/O)."""
