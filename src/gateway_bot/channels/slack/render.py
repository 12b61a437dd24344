"""How things look in Slack: the reply in mrkdwn, split below Slack's limits, the live
progress message, and approval cards in Block Kit. Pure functions over data.

Markdown -> mrkdwn is slackify-markdown (a markdown-it parser, so ``2 * 3 * 4`` and code
spans survive, and ``& < >`` are escaped as Slack requires); the regex-based converters
on PyPI mangle both. Splitting keeps code fences balanced: a chunk that ends inside a
fence closes it and the next chunk reopens it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from slackify_markdown import slackify_markdown  # type: ignore[import-untyped]

from gateway_bot.core.messages import Card, Progress, Reply

MESSAGE_LIMIT = 3500
"""Characters per posted message. Slack truncates ``text`` past 40,000 and advises under
4,000 for legibility; a section block takes at most 3,000."""
SECTION_LIMIT = 3000
_STEPS_SHOWN = 12
_STEP_LIMIT = 200
_FENCE = "```"


def escape(text: str) -> str:
    """Slack's three control characters, for text that is not markdown (steps, titles)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    converted: str = slackify_markdown(markdown)
    return _escape_code(converted.strip()) or escape(markdown.strip())


_FENCED = re.compile(r"(```.*?```)", re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]+`")


def _escape_code(mrkdwn: str) -> str:
    """slackify escapes ``& < >`` in text but not in code; Slack wants them escaped
    everywhere (an unescaped ``<`` can start a link)."""
    parts = _FENCED.split(mrkdwn)
    for index, part in enumerate(parts):
        if index % 2:
            parts[index] = escape(part)
        else:
            parts[index] = _CODE_SPAN.sub(lambda m: escape(m.group(0)), part)
    return "".join(parts)


def render_reply(reply: Reply, limit: int = MESSAGE_LIMIT) -> list[str]:
    """The reply as one or more mrkdwn messages; the usage line ends the last one."""
    text = to_mrkdwn(reply.text) if reply.text.strip() else "(empty reply)"
    if reply.is_error:
        text = f":warning: {text}"
    if reply.usage is not None:
        text += f"\n_{escape(reply.usage.summary())}_"
    return split_mrkdwn(text, limit)


def split_mrkdwn(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split at paragraph, then line boundaries; hard-split lines longer than ``limit``.
    A chunk never ends inside a code fence: it is closed and reopened in the next one."""
    if len(text) <= limit:
        return [text]
    budget = limit - len(_FENCE) - 1  # room to close a fence at the end of a chunk
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    in_fence = False
    for line in _lines_within(text, budget):
        if current and size + len(line) + 1 > budget:
            chunks.append(_close("\n".join(current), in_fence))
            current, size = ([_FENCE] if in_fence else []), (len(_FENCE) + 1 if in_fence else 0)
        current.append(line)
        size += len(line) + 1
        if line.lstrip().startswith(_FENCE):
            in_fence = not in_fence
    if current:
        chunks.append("\n".join(current))
    return [chunk for chunk in chunks if chunk.strip()]


def _lines_within(text: str, budget: int) -> list[str]:
    width = budget - len(_FENCE) - 1
    out: list[str] = []
    for line in text.split("\n"):
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            cut = cut if cut > width // 2 else width
            out.append(line[:cut])
            line = line[cut:].lstrip(" ")
        out.append(line)
    return out


def _close(chunk: str, in_fence: bool) -> str:
    return chunk + "\n" + _FENCE if in_fence else chunk


def progress_text(steps: Sequence[str], elapsed_s: float | None, *, done: str = "") -> str:
    """The acknowledgement message while the agent works, and its final state."""
    if done:
        head = done
    elif elapsed_s is None:
        head = ":hourglass_flowing_sand: Working on it…"
    else:
        head = f":hourglass_flowing_sand: Working… {elapsed_s:.0f} s"
    lines = [head]
    hidden = len(steps) - _STEPS_SHOWN
    if hidden > 0:
        lines.append(f"_… {hidden} earlier step{'s' if hidden != 1 else ''}_")
    for step in steps[-_STEPS_SHOWN:]:
        flat = " ".join(step.split())
        if len(flat) > _STEP_LIMIT:
            flat = flat[: _STEP_LIMIT - 1] + "…"
        lines.append(f"• {escape(flat)}")
    return "\n".join(lines)[:SECTION_LIMIT]


def progress_from(progress: Progress) -> str:
    return progress_text(progress.steps, progress.elapsed_s)


def done_text(reply: Reply, steps: Sequence[str]) -> str:
    """The acknowledgement's final state: the outcome and the steps taken."""
    head = ":warning: Finished with an error" if reply.is_error else ":white_check_mark: Done"
    if steps:
        head += f" · {len(steps)} step{'s' if len(steps) != 1 else ''}"
    return progress_text(steps, None, done=head)


def card_blocks(card: Card, *, with_buttons: bool = True) -> list[dict[str, Any]]:
    """A section with the title and body, then one button per card button."""
    body = to_mrkdwn(card.body) if card.body.strip() else ""
    text = f"*{escape(card.title)}*" + (f"\n{body}" if body else "")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}}
    ]
    if with_buttons and card.buttons:
        elements = []
        for button in card.buttons:
            label = f"{button.emoji} {button.label}".strip() if button.emoji else button.label
            element: dict[str, Any] = {
                "type": "button",
                "text": {"type": "plain_text", "text": label[:75], "emoji": True},
                "action_id": button.action_id,
                "value": button.action_id[:2000],
            }
            if button.style in ("primary", "danger"):
                element["style"] = button.style
            elements.append(element)
        blocks.append({"type": "actions", "block_id": "gateway_bot_card", "elements": elements})
    return blocks


def card_fallback(card: Card) -> str:
    """The notification text and what clients without Block Kit show."""
    return f"{card.title}: {card.body}"[:MESSAGE_LIMIT]
