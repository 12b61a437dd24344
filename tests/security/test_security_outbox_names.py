"""Outbox file names the agent picks to break the copy out: two names of 255 bytes that
clean to the same one (the second, numbered, would be past NAME_MAX), and one file whose
copy fails. Each costs at most its own file: the others go out, and nothing escapes
``take_outbox`` (which would turn the agent's whole answer into an internal error)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.sandbox.host_files import HostContextFiles
from tests.support.fake_anthropic import FakeAnthropic


def _context_files(root: Path) -> HostContextFiles:
    directories = [root / name for name in ("workspace", "home", "inbox", "outbox", "storage")]
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
    return HostContextFiles(*directories)


def test_two_longest_names_that_clean_alike_both_go_out_within_name_max(
    tmp_path: Path,
) -> None:
    files = _context_files(tmp_path / "conversation")
    planted = {
        "a" * 250 + "_.txt": "the first",
        "a" * 250 + "\x01.txt": "the second, same name once cleaned",
        "é" * 125 + "\x01.txt": "two-byte characters, cut whole",
        "é" * 125 + "\x02.txt": "the same, numbered",
    }
    for name, text in planted.items():
        (files.outbox / name).write_text(text)

    taken = asyncio.run(files.take_outbox(tmp_path / "sent", frozenset()))

    assert sorted(path.read_text() for path in taken) == sorted(planted.values())
    names = {path.name for path in taken}
    assert len(names) == 4
    assert all(len(name.encode()) <= 255 and name.endswith(".txt") for name in names)
    assert "a" * 250 + "_.txt" in names
    assert "a" * 249 + "-2.txt" in names, "the stem gave way for the number"
    assert "é" * 124 + "-2.txt" in names, "cut on a character boundary"
    assert not list(files.outbox.iterdir()), "each file goes out once"


def test_a_file_that_cannot_be_copied_stays_and_the_others_go_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = _context_files(tmp_path / "conversation")
    (files.outbox / "blocked.txt").write_text("kept for the next task")
    (files.outbox / "report.txt").write_text("findings")
    sent = tmp_path / "sent"
    (sent / "blocked.txt").mkdir(parents=True)  # the copy's destination cannot be a file
    (sent / "blocked.txt" / "entry").write_text("")

    with caplog.at_level(logging.WARNING):
        taken = asyncio.run(files.take_outbox(sent, frozenset()))

    assert [(path.name, path.read_text()) for path in taken] == [("report.txt", "findings")]
    assert (files.outbox / "blocked.txt").read_text() == "kept for the next task"
    assert not (files.outbox / "report.txt").exists()
    assert "outbox file 'blocked.txt' not sent" in caplog.text


def test_the_agent_gets_both_clashing_longest_names_sent_and_its_reply_read(
    gateway: Any, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path))
    make_files = (
        "RUN_BASH python3 -c \"[open('../outbox/' + 'a' * 250 + c + '.txt', 'w').write(c)"
        " for c in ('_', chr(1))]\""
    )
    chat.send(make_files)
    chat.expect(r"^agent> Echo: RUN_BASH")
    first = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/a{250}_\.txt$")
    second = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/a{249}-2\.txt$")
    chat.finish()
    sent = [Path(line.split("[file] ")[1]) for line in (first, second)]
    assert sorted(path.read_text() for path in sent) == ["\x01", "_"]
    assert chat.count(r"Internal error") == 0
