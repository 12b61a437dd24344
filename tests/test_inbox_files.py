"""Names chosen by senders never escape the inbox, hide, or overwrite."""

from __future__ import annotations

from pathlib import Path

from gateway_bot.core.inbox_files import safe_filename, size_text, unused_path


def test_hostile_names_become_plain_names_in_the_inbox(tmp_path: Path) -> None:
    assert safe_filename("../../etc/passwd") == "passwd"
    assert safe_filename("..\\..\\boot.ini") == "boot.ini"
    assert safe_filename(".hidden") == "hidden"
    assert safe_filename("") == "file"
    assert len(safe_filename("x" * 300 + ".tar.gz")) <= 100
    assert safe_filename("x" * 300 + ".pdf").endswith(".pdf")


def test_a_second_file_of_the_same_name_does_not_overwrite(tmp_path: Path) -> None:
    (tmp_path / "report.txt").write_text("first")
    assert unused_path(tmp_path, "report.txt").name == "report-2.txt"
    assert unused_path(tmp_path, "README").name == "README"


def test_sizes_read_as_people_say_them() -> None:
    assert size_text(512) == "512 bytes"
    assert size_text(25_000_000) == "25.0 MB"
