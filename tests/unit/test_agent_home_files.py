"""The host writes Gemini CLI's settings into the agent's home before each run: links the
agent planted there must not carry that write anywhere else (the attack)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway_bot.sandbox.home_files import write_home_file


def test_a_link_at_the_settings_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    home, outside = tmp_path / "home", tmp_path / "host-secret"
    (home / ".gemini").mkdir(parents=True)
    outside.write_text("host file")
    (home / ".gemini" / "settings.json").symlink_to(outside)
    os.link(outside, home / ".gemini" / "hard.json")
    asyncio.run(write_home_file(home, ".gemini/settings.json", "{}"))
    asyncio.run(write_home_file(home, ".gemini/hard.json", "{}"))
    assert outside.read_text() == "host file"
    assert not (home / ".gemini" / "settings.json").is_symlink()
    assert (home / ".gemini" / "settings.json").read_text() == "{}"


def test_a_linked_directory_is_refused(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    (home / ".gemini").symlink_to(elsewhere)
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        asyncio.run(write_home_file(home, ".gemini/settings.json", "{}"))
    assert list(elsewhere.iterdir()) == []
