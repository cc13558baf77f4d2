"""The coding toolkit's internal API by its public name: what kimik3's other packages (the coding
harness, eval, the CLI) use of :mod:`kimik3.tools.coding` besides :func:`coding_tools` and
:class:`Sandbox` (issue 42: a module used across packages has a public name). It re-exports all of
:mod:`kimik3.tools.coding._api`'s ``__all__``, which lists and describes each name;
``tests/test_architecture.py`` checks that nothing outside the toolkit imports its other modules.
"""

from ._api import *  # noqa: F403 - the whole of _api's __all__, so the two cannot drift
from ._api import __all__ as __all__
