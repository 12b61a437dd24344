"""The console read as bad input: bytes that are not UTF-8 on standard input (a paste from a
Latin-1 terminal, a binary file piped in). Under a UTF-8 locale such as en_US.UTF-8 Python
decodes standard input strictly; before the fix the reading thread died of
UnicodeDecodeError and the console went deaf while the daemon kept running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.fake_anthropic import FakeAnthropic

STRICT = {"PYTHONIOENCODING": "utf-8:strict"}
"""What Python does under en_US.UTF-8 (the C.UTF-8 locale of this machine is lenient)."""


def test_a_line_that_is_not_utf8_is_read_and_the_console_keeps_listening(
    gateway: Any, config_path: Path, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(config_path), env=STRICT)
    chat.expect(r"^gateway-bot console · conversation default \([0-9a-f]{8}\)")
    stdin = chat.process.stdin
    stdin.flush()
    stdin.buffer.write(b"LATIN-LINE caf\xe9 cr\xe8me \xff\xfe\n")
    stdin.buffer.flush()
    chat.expect(r"^agent> Echo: .*LATIN-LINE caf\ufffd cr\ufffdme")
    chat.send("AFTER-LINE still there?")
    chat.expect(r"^agent> Echo: .*AFTER-LINE still there\?")
    chat.finish()
