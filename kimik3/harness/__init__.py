"""The coding harness for long-horizon runs: project instructions (``AGENTS.md``), Agent Skills,
read-before-edit, ``multi_edit`` / ``apply_patch``, checkpoints and undo, background processes and
sub-agents, each a small module joined to the :class:`~kimik3.Agent` through
:class:`~kimik3.agents.RunHooks`.
:class:`CodingHarness` assembles them (``kimik3 run`` uses it).
"""

from ._background import BackgroundProcesses, SandboxHooks
from ._checkpoints import WRITING_TOOLS, Checkpoints
from ._git import SAFE_CONFIG as SAFE_CONFIG
from ._git import clean_env as clean_env
from ._harness import FEATURES, CodingHarness, Feature, background_tools, patch_tools
from ._instructions import AGENTS_FILE, MAX_INSTRUCTIONS_BYTES, MAX_TOTAL_INSTRUCTIONS_BYTES, ProjectInstructions
from ._patch import EditSpec, FileAccess, apply_edits, apply_patch_text, parse_patch
from ._records import session_checkpoints
from ._skill_files import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, MAX_SKILL_BYTES, SKILL_FILE, Skill
from ._skills import MAX_CATALOG_BYTES, WORKSPACE_SKILL_FOLDERS, WORKSPACE_SKILLS, Skills, user_skills_folder
from ._tasks import SUBAGENT_INSTRUCTIONS, SubAgents
from ._tracking import ReadTracker
from ._undo import undo

# Imported `as` themselves and left out of __all__ (the user API): names kimik3's other packages use of
# this package's private modules, so that none imports another package's `_module` (issue 42,
# tests/test_architecture.py).
__all__ = [
    "AGENTS_FILE",
    "FEATURES",
    "MAX_CATALOG_BYTES",
    "MAX_DESCRIPTION_CHARS",
    "MAX_INSTRUCTIONS_BYTES",
    "MAX_NAME_CHARS",
    "MAX_SKILL_BYTES",
    "MAX_TOTAL_INSTRUCTIONS_BYTES",
    "SKILL_FILE",
    "SUBAGENT_INSTRUCTIONS",
    "WORKSPACE_SKILLS",
    "WORKSPACE_SKILL_FOLDERS",
    "WRITING_TOOLS",
    "BackgroundProcesses",
    "Checkpoints",
    "CodingHarness",
    "EditSpec",
    "Feature",
    "FileAccess",
    "ProjectInstructions",
    "ReadTracker",
    "SandboxHooks",
    "Skill",
    "Skills",
    "SubAgents",
    "apply_edits",
    "apply_patch_text",
    "background_tools",
    "parse_patch",
    "patch_tools",
    "session_checkpoints",
    "undo",
    "user_skills_folder",
]
