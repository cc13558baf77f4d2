"""The coding toolkit's internal API: what kimik3's other packages (the coding harness, eval, the
CLI) may use of :mod:`kimik3.tools.coding` besides its public names (:func:`coding_tools`,
:class:`Sandbox`). Everything else in the package is private to it; ``tests/test_architecture.py``
checks that nothing outside imports its other modules.

- :class:`Workspace`: confinement to the workspace root (paths resolved and opened from the
  root's descriptor, no symlink followed out of it), file reading; :func:`show_path`: a path as
  the tools show it; :class:`SessionFiles`: the run's session files and the folders kimik3 acts on
  later, which no tool writes (:func:`is_sparse`: a file with holes, not copied blindly;
  :func:`kept_paths`, :func:`repositories`, :func:`made_repositories`: the repositories a walk
  finds, and those a command made during a run that name programs);
- the file text rules of ``edit_file`` (encodings, line endings, binary files, the size limit,
  diffs): :data:`MAX_EDIT_BYTES`, :func:`decode`, :func:`encode`, :func:`is_binary`,
  :func:`lines_and_endings`, :func:`replace_keeping_endings`, :func:`sniff_encoding`,
  :func:`split_lines`, :func:`to_utf8`, :func:`unified_diff`, :func:`usual_ending`;
- writes that land only while their call is live: :class:`Staged`, :func:`stage`, :func:`replace`;
- :data:`FILE_TOOL_TIMEOUT_S`: the time limit of a file tool's call; :func:`walk_files`: the
  regular files below a directory descriptor as grep and glob walk them;
- :func:`shell_env`: the environment a command runs with; :func:`credential_env`: whether a
  variable (a name, its value) is a credential, the rule that keeps it out of that environment;
  :class:`Command`: a command started in the run's :class:`~kimik3.tools.coding.Sandbox`
  (background processes).
"""

from ._bash import shell_env
from ._files import (
    MAX_EDIT_BYTES,
    decode,
    encode,
    is_binary,
    lines_and_endings,
    replace_keeping_endings,
    sniff_encoding,
    split_lines,
    to_utf8,
    unified_diff,
    usual_ending,
)
from ._git_config import config_named, made_repositories
from ._git_index import is_sparse
from ._kept import SessionFiles, kept_paths, repositories
from ._paths import Workspace, show_path
from ._policy import credential_env
from ._sandbox import Command
from ._search import walk_files
from ._toolkit import FILE_TOOL_TIMEOUT_S
from ._write import Staged, replace, stage

__all__ = [
    "FILE_TOOL_TIMEOUT_S",
    "MAX_EDIT_BYTES",
    "SessionFiles",
    "Command",
    "Staged",
    "Workspace",
    "decode",
    "encode",
    "is_binary",
    "is_sparse",
    "kept_paths",
    "lines_and_endings",
    "made_repositories",
    "config_named",
    "credential_env",
    "replace",
    "replace_keeping_endings",
    "repositories",
    "shell_env",
    "show_path",
    "sniff_encoding",
    "split_lines",
    "stage",
    "to_utf8",
    "unified_diff",
    "usual_ending",
    "walk_files",
]
