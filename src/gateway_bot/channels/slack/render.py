"""How things look in Slack: the reply in mrkdwn, split below Slack's limits, the live
progress message, and approval cards in Block Kit. Pure functions over data.

Markdown -> mrkdwn is slackify-markdown (a markdown-it parser, so ``2 * 3 * 4`` and code
spans survive); the regex-based converters on PyPI mangle both. Splitting keeps code
fences balanced: a chunk that ends inside a fence closes it and the next chunk reopens it.

Mentions: everything the bot posts is text from people or the agent, never a mention of
ours, so every ``& < >`` that is not markup this module generated is escaped with
``escape`` (slackify itself lets ``<!channel>``, ``<!here>``, ``<!subteam^…>`` and
``<@U…>`` through, and a markdown link to ``!here`` becomes ``<!here|x>``). The only
``<`` left live are the links ``_SafeSlackify`` writes, to http(s) and mailto targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from slackify_markdown.slackify import SlackifyMarkdown  # type: ignore[import-untyped]

from gateway_bot.core.admission.cards import shown_as_text
from gateway_bot.domain.messages import Card, Progress, Reply

MESSAGE_LIMIT = 3500
"""Characters per posted message. Slack truncates ``text`` past 40,000 and advises under
4,000 for legibility; a section block takes at most 3,000."""
SECTION_LIMIT = 3000
_STEPS_SHOWN = 12
_STEP_LIMIT = 200
_FENCE = "```"


def escape(text: str) -> str:
    """Slack's three control characters: the one way text that is not our own markup
    (agent output, what people typed, names of people, rooms and files) reaches Slack, so
    none of it can become a mention, a link or a broadcast."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def notice(emoji: str, text: str) -> str:
    """A one-line notice from plain text (file problems, acknowledgements)."""
    return f"{emoji} {escape(text)}"


def to_mrkdwn(markdown: str) -> str:
    converted: str = _SafeSlackify(markdown).slackify()
    return converted.strip() or escape(markdown.strip())


_LINK_SCHEMES = frozenset({"http", "https", "mailto"})


def _link_target(href: str) -> str | None:
    """The href as the target of a Slack link, or None when it must stay text: anything
    but http(s) and mailto (``!here``, ``@U1``, ``#C1`` would be live mentions)."""
    parsed = urlparse(href)
    if parsed.scheme.lower() not in _LINK_SCHEMES:
        return None
    if parsed.scheme.lower() != "mailto" and not parsed.netloc:
        return None
    # markdown-it percent-encodes these already; the link must not end or split early.
    return escape(href.replace("|", "%7C").replace("<", "%3C").replace(">", "%3E"))


class _SafeSlackify(SlackifyMarkdown):  # type: ignore[misc]
    """slackify-markdown with every piece of text escaped (its own escaping keeps
    ``<!…>``, ``<@…>`` and ``<#…>`` live, and leaves code, image text and link targets
    raw) and links only to http(s) and mailto."""

    def __init__(self, markdown_text: Any) -> None:
        super().__init__(markdown_text)
        self._open_links: list[tuple[bool, str]] = []  # (live link?, href), innermost last

    def text(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        return escape(tokens[idx].content)

    def code_inline(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        return f"`{escape(tokens[idx].content)}`"

    def code_block(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        return f"```\n{escape(tokens[idx].content)}```\n"

    def fence(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        return f"```\n{escape(tokens[idx].content)}```\n"

    def link_open(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        href = str(tokens[idx].attrs.get("href", ""))
        target = _link_target(href)
        self._open_links.append((target is not None, href))
        if target is None:
            return ""
        return f"<{target}" if tokens[idx + 1].nesting == -1 else f"<{target}|"

    def link_close(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        """A live link closes; any other target follows its text, escaped."""
        live, href = self._open_links.pop() if self._open_links else (False, "")
        if live:
            return ">"
        return f" ({escape(href)})" if href else ""

    def image(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        src = str(tokens[idx].attrs.get("src", ""))
        alt = escape(tokens[idx].content or str(tokens[idx].attrs.get("title", "") or ""))
        target = _link_target(src)
        if target is None:
            return alt
        return f"<{target}|{alt}>" if alt else f"<{target}>"

    def renderToken(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        """A token slackify has no rule for renders as nothing, never as an HTML tag."""
        return ""


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
            cut = _outside_tokens(line, cut if cut > width // 2 else width)
            out.append(line[:cut])
            line = line[cut:].lstrip(" ")
        out.append(line)
    return out


def _outside_tokens(line: str, cut: int) -> int:
    """Move a hard cut back to the start of the link, mention or entity it would halve
    (``<https://…|label>``, ``<@U1>``, ``&amp;``): half a link is neither link nor text.
    A token longer than half the width is cut all the same (it could never fit)."""
    opened = line.rfind("<", 0, cut)
    if opened > line.rfind(">", 0, cut) and opened > cut // 2:
        cut = opened
    entity = line.rfind("&", 0, cut)
    if entity > line.rfind(";", 0, cut) and cut - entity <= len("&amp;"):
        cut = entity
    return cut


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
    head = (
        ":octagonal_sign: Stopped"
        if reply.stopped
        else ":warning: Finished with an error"
        if reply.is_error
        else ":white_check_mark: Done"
    )
    if steps:
        head += f" · {len(steps)} step{'s' if len(steps) != 1 else ''}"
    return progress_text(steps, None, done=head)


def card_blocks(card: Card, *, with_buttons: bool = True) -> list[dict[str, Any]]:
    """A section with the title and body, then one button per card button."""
    body = to_mrkdwn(card.body) if card.body.strip() else ""
    text = f"*{escape(shown_as_text(card.title))}*" + (f"\n{body}" if body else "")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}}
    ]
    if with_buttons and card.buttons:
        elements = []
        for button in card.buttons:
            name = shown_as_text(button.label)  # plain text: the core's escapes go
            label = f"{button.emoji} {name}".strip() if button.emoji else name
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
    return escape(shown_as_text(f"{card.title}: {card.body}"))[:MESSAGE_LIMIT]
