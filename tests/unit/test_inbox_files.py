"""Names chosen by senders never escape the inbox, hide, or overwrite; and the inbox, which
the agent can write, never makes the daemon write through a link or onto a file it put
there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway_bot.core.workspaces.inbox_files import (
    InboxError,
    InboxWriter,
    safe_filename,
    size_text,
)


def test_hostile_names_become_plain_names_in_the_inbox(tmp_path: Path) -> None:
    assert safe_filename("../../etc/passwd") == "passwd"
    assert safe_filename("..\\..\\boot.ini") == "boot.ini"
    assert safe_filename(".hidden") == "hidden"
    assert safe_filename("") == "file"
    assert len(safe_filename("x" * 300 + ".tar.gz")) <= 100
    assert safe_filename("x" * 300 + ".pdf").endswith(".pdf")


def test_sizes_read_as_people_say_them() -> None:
    assert size_text(512) == "512 bytes"
    assert size_text(25_000_000) == "25.0 MB"


@pytest.fixture
def conversation(tmp_path: Path) -> Path:
    (tmp_path / "conversation" / "inbox").mkdir(parents=True)
    return tmp_path / "conversation"


async def test_a_second_file_of_the_same_name_does_not_overwrite(conversation: Path) -> None:
    inbox = InboxWriter(conversation)
    assert await inbox.save("report.txt", b"first") == "report.txt"
    assert await inbox.save("report.txt", b"second") == "report-2.txt"
    assert await inbox.save("README", b"x") == "README"
    assert (conversation / "inbox" / "report.txt").read_bytes() == b"first"


async def test_links_and_directories_the_agent_planted_are_never_written_through(
    conversation: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "etc-cron-d-x"
    inbox_dir = conversation / "inbox"
    (inbox_dir / "report.txt").symlink_to(victim)  # dangling: "free" to exists()
    (inbox_dir / "report-2.txt").mkdir()
    (inbox_dir / "report-3.txt").symlink_to(tmp_path)  # a link to a directory
    saved = await InboxWriter(conversation).save("report.txt", b"payload")
    assert saved == "report-4.txt"
    assert not victim.exists()
    assert os.readlink(inbox_dir / "report.txt") == str(victim), "the link is left as it was"
    assert (inbox_dir / "report-4.txt").read_bytes() == b"payload"
    assert not list((conversation / "incoming").iterdir()), "nothing left in staging"


async def test_an_inbox_replaced_by_a_link_is_refused(conversation: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (conversation / "inbox").rmdir()
    (conversation / "inbox").symlink_to(elsewhere)
    with pytest.raises(InboxError, match="inbox is unusable"):
        await InboxWriter(conversation).save("a.txt", b"x")
    assert not list(elsewhere.iterdir())


async def test_a_download_that_fails_leaves_nothing_behind(conversation: Path) -> None:
    inbox = InboxWriter(conversation)

    async def interrupted_download() -> None:
        async with inbox.receive("big.bin") as incoming:
            await incoming.write(b"part")
            raise RuntimeError("too large")

    with pytest.raises(RuntimeError):
        await interrupted_download()
    assert not list((conversation / "inbox").iterdir())
    assert not list((conversation / "incoming").iterdir())
