"""The coding toolkit: see :func:`coding_tools`."""

from ._toolkit import coding_tools

__all__ = ["coding_tools"]
