"""A session file is never written through a symlink (issue 40: a predictable sub-agent session
name planted as a link would be followed out of the workspace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3 import SessionError
from kimik3.agents import SessionWriter


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlinked_session_is_refused_and_its_target_untouched(tmp_path: Path, target_exists: bool) -> None:
    outside = tmp_path / "outside.txt"
    if target_exists:
        outside.write_bytes(b"the user's file\n")
    link = tmp_path / "ws" / "s.jsonl"
    link.parent.mkdir()
    link.symlink_to(outside)
    with pytest.raises(SessionError, match=r"s\.jsonl is a symlink; a session written must be a regular file"):
        SessionWriter(link)
    assert (outside.read_bytes() if target_exists else outside.exists()) == (
        b"the user's file\n" if target_exists else False)
    # control: the same name as a plain file is written
    link.unlink()
    SessionWriter(link).close()
    assert link.is_file() and not link.is_symlink()
