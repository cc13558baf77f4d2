"""A media path naming a FIFO, a device or a directory is refused with MediaError before any
open that could block (a FIFO's open waits for a writer forever; /dev/zero never ends).
Hangs are tested in a child process with a generous limit, never a wall-clock assertion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimik3 import MediaError
from kimik3.media import prepare_image, sample_video

_CHILD = """
import asyncio, sys
from kimik3 import Client, MediaError, ScriptedEngine
from kimik3.formats.k3 import render_output
eng = ScriptedEngine([render_output({"reasoning_content": "r", "content": "ok"})])
eng.allow_local_files = True
part = {"type": sys.argv[2], sys.argv[2]: {"url": sys.argv[1]}}
try:
    asyncio.run(Client(eng).chat([{"role": "user", "content": [part]}]))
except MediaError as e:
    print("MediaError:", e)
"""


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "x.png"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["image_url", "video_url"])
def test_chat_with_fifo_part_fails_typed_not_hangs(fifo: Path, kind: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(fifo), kind], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.startswith("MediaError: cannot read media from"), done.stdout + done.stderr
    assert "not a regular file" in done.stdout


@pytest.mark.parametrize("source", ["fifo", "/dev/zero", "/dev/null"])
def test_prepare_image_refuses_special_files(fifo: Path, source: str) -> None:
    path = str(fifo) if source == "fifo" else source
    with pytest.raises(MediaError, match="not a regular file"):
        prepare_image(path)


def test_media_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="is a directory"):
        prepare_image(tmp_path)
    with pytest.raises(MediaError, match="is a directory"):
        sample_video(tmp_path)


@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
def test_sample_video_refuses_special_files(fifo: Path, source: str) -> None:
    path = str(fifo) if source == "fifo" else source
    with pytest.raises(MediaError, match="not a regular file"):
        sample_video(path)
