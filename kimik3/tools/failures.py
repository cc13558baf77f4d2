"""The texts the model reads when a tool call fails, by their public name for kimik3's other
packages (the agent, the harness): ``from kimik3.tools import failures``, then
``failures.denied(reason)``, ``failures.FailureText``, ... (issue 42: a module used across
packages has a public name). The words live in :mod:`kimik3.tools._failures`, the one module that
holds them (``tests/test_architecture.py`` checks it); this module re-exports all of its
``__all__``.
"""

from ._failures import *  # noqa: F403 - the whole of _failures' __all__, so the two cannot drift
from ._failures import __all__ as __all__
