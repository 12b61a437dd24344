"""What the console prints: chat markdown as terminal text, and cards as numbered choices.

Replies, cards and notices are written for chat apps (markdown: backticks, ``\\*`` escapes,
```` ```diff ```` fences). A terminal shows them rendered (rich: bold, code, a coloured diff)
and, when standard output is not a terminal (a pipe, a log file, a test), as plain text with
no escape codes at all: the same layout without the markup.

Everything shown passes ``printable`` first: the text comes from the agent (and the repo it
read), and a raw escape sequence could rewrite the screen, retitle the window or set the
clipboard (OSC 52). rich adds only its own styles; links are shown as text, never as OSC 8
hyperlinks (an address the agent chose would hide behind its words).

rich is imported on the first thing printed, not when the console channel loads: a start
that prints nothing never pays for it.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gateway_bot.core.admission.cards import shown_as_text
from gateway_bot.domain.messages import Card

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 and C1 controls but newline and tab: ESC and CSI start terminal escape sequences."""

PLAIN_WIDTH = 120
PLAIN_MAX_WIDTH = 2000
"""Without a terminal nothing says how wide the output is: the text is laid out as wide as
its longest line (at least ``PLAIN_WIDTH``, at most ``PLAIN_MAX_WIDTH``), so a pipe's reader
gets each line of a message as it was written, never wrapped or cut."""


def printable(text: str) -> str:
    """``text`` with its control characters shown as ``\\xNN``."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def terminal_text(markdown: str, *, tty: bool, width: int | None = None) -> str:
    """``markdown`` as a terminal shows it: styled for a TTY, plain (no escape codes, the
    markup gone, trailing blanks trimmed) otherwise. Without a trailing newline."""
    from rich.console import Console

    text = printable(markdown)
    if width is None and not tty:
        longest = max((len(line) for line in text.splitlines()), default=0)
        width = min(PLAIN_MAX_WIDTH, max(PLAIN_WIDTH, longest + 8))
    out = io.StringIO()
    console = Console(
        file=out,
        force_terminal=tty,
        color_system="standard" if tty else None,
        width=width,
        highlight=False,
        emoji=False,
        markup=False,
    )
    rendered = _markdown_class()(text, hyperlinks=False)
    # A line break in a chat message is one on screen (chat apps show it so; markdown
    # would join the lines of a paragraph: "Scheduled #1 ... Next runs: ..." on one line).
    for token in rendered.parsed:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"
    console.print(rendered)
    lines: list[str] = []
    for line in out.getvalue().splitlines():
        line = line.rstrip()
        if line or (lines and lines[-1]):  # no blank lines first, none twice
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


@functools.cache
def _markdown_class() -> Any:
    """rich's Markdown, its numbered lists shown as written ("1. first"; rich drops the
    dot, and "1 waiting:" above "1 second message" reads as nonsense)."""
    from rich.markdown import ListItem, Markdown
    from rich.segment import Segment

    class NumberedAsWritten(ListItem):
        def render_number(self, console: Any, options: Any, number: int, last: int) -> Any:
            width = len(str(last)) + 3
            lines = console.render_lines(
                self.elements, options.update(width=options.max_width - width), style=self.style
            )
            style = console.get_style("markdown.item.number", default="none")
            numeral = Segment(f"{number}.".rjust(width - 1) + " ", style)
            for index, line in enumerate(lines):
                yield numeral if index == 0 else Segment(" " * width, style)
                yield from line
                yield Segment("\n")

    class ChatMarkdown(Markdown):
        elements: ClassVar[dict[str, Any]] = {
            **Markdown.elements,
            "list_item_open": NumberedAsWritten,
        }

    return ChatMarkdown


@dataclass
class Choices:
    """The console's open cards, each button a number the person types. Numbers run on
    across the cards open together (1-3 for the first, 4-6 for the next), so a number never
    means two buttons; a decided card's numbers are retired, and once none is open the
    next card starts at 1 again."""

    _next: int = 1
    _cards: int = 0
    by_number: dict[str, str] = field(default_factory=dict)
    """The number typed -> the button's action id."""
    _of_card: dict[str, list[str]] = field(default_factory=dict)

    def offer(self, card: Card) -> tuple[str, list[str]]:
        """A ref for the card, and a line per button: ``  1) Allow once``."""
        self._cards += 1
        ref = f"card-{self._cards}"
        if not self.by_number:  # no card open: its buttons are 1, 2, 3 again
            self._next = 1
        lines, numbers = [], []
        for button in card.buttons:
            number = str(self._next)
            self._next += 1
            self.by_number[number] = button.action_id
            numbers.append(number)
            lines.append(f"  {number}) {printable(shown_as_text(button.label))}")
        self._of_card[ref] = numbers
        return ref, lines

    def reoffer(self, ref: str, card: Card) -> list[str]:
        """The card ``ref`` changed: its buttons keep their numbers while it has the same
        number of them (a card refreshed with more held messages); a decided card (no
        buttons) has its numbers retired. A line per button still offered."""
        numbers = self._of_card.pop(ref, [])
        for number in numbers:
            self.by_number.pop(number, None)
        if not card.buttons or len(card.buttons) != len(numbers):
            return []
        self._of_card[ref] = numbers
        lines = []
        for number, button in zip(numbers, card.buttons, strict=True):
            self.by_number[number] = button.action_id
            lines.append(f"  {number}) {printable(shown_as_text(button.label))}")
        return lines

    def chosen(self, line: str) -> str | None:
        """The action id of the button whose number ``line`` is (spaces aside), or None."""
        typed = line.strip()
        if not (typed.isascii() and typed.isdigit() and len(typed) <= 6):
            return None
        return self.by_number.get(str(int(typed)))
