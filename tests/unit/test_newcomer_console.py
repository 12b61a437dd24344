"""The console prints what the agent wrote (and the repo it read) into the user's own
terminal: a planted escape sequence must show as text, never act on the terminal."""

from __future__ import annotations

import io

from gateway_bot.channels.console import ConsoleAdapter
from gateway_bot.domain.messages import Button, Card, Progress, Reply

ATTACKS = (
    "\x1b]52;c;cm0gLXJmIH4K\x07",  # OSC 52: put "rm -rf ~" on the clipboard
    "\x1b[2J\x1b[H",  # clear the screen, cursor home
    "\x9b31m",  # C1 CSI: the same in one byte
    "Denied\rAllowed",  # a carriage return prints over what came before
)


async def test_escape_sequences_from_the_agent_show_as_text() -> None:
    out = io.StringIO()
    console = ConsoleAdapter("default", stdin=io.StringIO(), stdout=out)
    for attack in ATTACKS:
        await console.send_reply({}, "t1", Reply(text=f"agent says {attack}"))
        await console.send_progress({}, Progress("t1", (f"Bash: printf '{attack}'",), 1.0, 1))
    await console.send_card(
        {}, Card("Allow?", "\x1b[8mhidden\x1b[0m", (Button("Allow", "a:1:allow"),))
    )
    printed = out.getvalue()
    assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in printed)
    assert "agent> agent says \\x1b]52;c;cm0gLXJmIH4K\\x07\n" in printed
    assert "  · Bash: printf '\\x1b[2J\\x1b[H'\n" in printed
    assert "agent> agent says \\x9b31m\n" in printed
    assert "agent> agent says Denied\\x0dAllowed\n" in printed
    assert "\\x1b[8mhidden\\x1b[0m" in printed
    # Newlines and tabs are the reply's layout, kept as they are.
    await console.send_reply({}, "t2", Reply(text="line one\n\tindented"))
    assert out.getvalue().endswith("agent> line one\n\tindented\n")
