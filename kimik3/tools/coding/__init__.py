"""The coding toolkit: ``bash``, ``read_file``, ``write_file``, ``edit_file``, ``grep``, ``glob``.

See :func:`coding_tools`. Modules: ``_toolkit`` (the tools the model reads), ``_paths``
(confinement to the workspace, file reading), ``_search`` (grep, glob), ``_bash`` (processes);
``_api`` is what kimik3's other packages (the coding harness) may import of the rest.
"""

from ._toolkit import coding_tools

__all__ = ["coding_tools"]
