"""The coding toolkit: ``bash``, ``read_file``, ``write_file``, ``edit_file``, ``grep``, ``glob``.

See :func:`coding_tools`. Modules: ``_toolkit`` (the tools the model reads), ``_paths``
(confinement to the workspace, file reading), ``_search`` (grep, glob), ``_bash`` (processes),
``_sandbox`` (where commands run: bubblewrap), ``_reaper`` (the supervisor and per-command reaper);
``_api`` is what kimik3's other packages (the coding harness) may import of the rest.
"""

from ._sandbox import ProcessLimits, Sandbox, SandboxMode
from ._toolkit import coding_tools

__all__ = ["ProcessLimits", "Sandbox", "SandboxMode", "coding_tools"]
