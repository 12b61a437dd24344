"""What the bot's Matrix messages look like: pure functions from replies, progress and cards
to event content (a plain-text ``body`` plus ``org.matrix.custom.html``).

Replies are markdown from the agent. They are rendered with raw HTML disabled (the agent's
text is never trusted as markup), code blocks kept as ``<pre><code class="language-x">``,
and split below the event size limit (64 KiB for the whole event, both bodies included),
never inside a code block without closing and reopening its fence.

Mentions: every message the bot sends carries an empty ``m.mentions``. Its text is the
agent's or what people typed, so it must never ping anyone: with ``m.mentions`` present,
clients and the homeserver's push rules notify only whom it names (nobody), not members
whose name appears in the text, nor ``@room``. A ``matrix.to`` link to a user still shows
as a pill, and does not ping. Images are kept only from ``mxc://`` (the homeserver's own
media); any other ``src`` is made a link, so no client fetches an outside address when it
shows the message.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererProtocol
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from gateway_bot.core.admission.cards import shown_as_text
from gateway_bot.domain.messages import Card, Progress, Reply

JsonDict = dict[str, Any]

HTML_FORMAT = "org.matrix.custom.html"
_MAX_STEPS_SHOWN = 12
_USAGE_RESERVE = 300
"""Bytes kept free in the last part for the usage line."""

MENTIONS = "m.mentions"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def _image(
    renderer: RendererProtocol,
    tokens: Sequence[Token],
    idx: int,
    options: OptionsDict,
    env: EnvType,
) -> str:
    """An ``<img>`` only from ``mxc://``; any other source becomes a link to it (its alt
    text as the label), so showing the message fetches nothing from outside."""
    token = tokens[idx]
    src = str(token.attrs.get("src", ""))
    label = "".join(child.content for child in token.children or ()) or src
    alt = html.escape(label)
    if src.startswith("mxc://"):
        return f'<img src="{html.escape(src)}" alt="{alt}">'
    if src.startswith(("https://", "http://")):
        return f'<a href="{html.escape(src)}">{alt}</a>'
    return alt


_markdown = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(
    ["table", "strikethrough"]
)
_markdown.add_render_rule("image", _image)


def markdown_to_html(text: str) -> str:
    rendered: str = _markdown.render(text)
    return rendered.strip()


def message_content(plain: str, formatted: str, msgtype: str = "m.text") -> JsonDict:
    return {
        "msgtype": msgtype,
        "body": plain,
        "format": HTML_FORMAT,
        "formatted_body": formatted,
        MENTIONS: {},
    }


def without_mentions(content: JsonDict) -> JsonDict:
    """``content`` mentioning nobody (also the new content of an edit): applied to every
    message the bot sends, files included, whoever built the content."""
    silenced: JsonDict = {**content, MENTIONS: {}}
    new_content = content.get("m.new_content")
    if isinstance(new_content, dict):
        silenced["m.new_content"] = {**new_content, MENTIONS: {}}
    return silenced


def in_conversation(content: JsonDict, thread_root: str | None, reply_to: str | None) -> JsonDict:
    """Place a message in the thread it answers (with the fallback reply for clients
    without threads), or as a reply to the message in the main timeline."""
    if thread_root:
        relation: JsonDict = {
            "rel_type": "m.thread",
            "event_id": thread_root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": reply_to or thread_root},
        }
        return {**content, "m.relates_to": relation}
    if reply_to:
        return {**content, "m.relates_to": {"m.in_reply_to": {"event_id": reply_to}}}
    return content


def edit_of(target_event_id: str, new_content: JsonDict) -> JsonDict:
    """An ``m.replace`` edit: clients show ``m.new_content``; the ``* `` body is the
    fallback for clients that do not understand edits."""
    fallback = {
        **new_content,
        "body": "* " + str(new_content.get("body", "")),
    }
    if "formatted_body" in new_content:
        fallback["formatted_body"] = "* " + str(new_content["formatted_body"])
    return {
        **fallback,
        "m.new_content": new_content,
        "m.relates_to": {"rel_type": "m.replace", "event_id": target_event_id},
    }


# -- replies -------------------------------------------------------------------------------


def split_markdown(text: str, max_bytes: int) -> list[str]:
    """Split on line boundaries into parts of at most ``max_bytes`` UTF-8 bytes. A part
    that ends inside a fenced code block closes the fence; the next part reopens it."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    fence: tuple[str, str] | None = None  # (closing marker, opening line)
    for line in _pieces(text.split("\n"), max(200, max_bytes // 2)):
        cost = len(line.encode()) + 1
        closing = len(fence[0].encode()) + 1 if fence else 0
        if current and size + cost + closing > max_bytes:
            if fence:
                current.append(fence[0])
            parts.append("\n".join(current))
            current = [fence[1]] if fence else []
            size = sum(len(x.encode()) + 1 for x in current)
        current.append(line)
        size += cost
        fence = _fence_after(line, fence)
    if current and any(x.strip() for x in current):
        parts.append("\n".join(current))
    return parts or [""]


def _pieces(lines: Sequence[str], limit: int) -> list[str]:
    """Lines, with any line longer than ``limit`` bytes cut into shorter pieces."""
    out: list[str] = []
    for line in lines:
        while len(line.encode()) > limit:
            cut = limit
            while len(line[:cut].encode()) > limit:
                cut -= 1
            out.append(line[:cut])
            line = line[cut:]
        out.append(line)
    return out


def _fence_after(line: str, fence: tuple[str, str] | None) -> tuple[str, str] | None:
    match = _FENCE.match(line)
    if match is None:
        return fence
    marker = match.group(1)
    if fence is None:
        return (marker, line)
    closes = (
        marker[0] == fence[0][0] and len(marker) >= len(fence[0]) and not match.group(2).strip()
    )
    return None if closes else fence


def reply_contents(reply: Reply, max_bytes: int) -> list[JsonDict]:
    """The reply as one or more ``m.text`` contents, the usage line ending the last."""
    text = reply.text if not reply.is_error else f"⚠️ {reply.text}"
    rendered: list[tuple[str, str]] = []
    for part in split_markdown(text, max_bytes - _USAGE_RESERVE):
        rendered.extend(_render_within(part, max_bytes - _USAGE_RESERVE))
    if reply.usage is not None:
        plain, formatted = rendered[-1]
        summary = reply.usage.summary()
        rendered[-1] = (
            f"{plain}\n\n{summary}",
            f"{formatted}\n<p><sub>{html.escape(summary)}</sub></p>",
        )
    return [message_content(plain, formatted) for plain, formatted in rendered]


def _render_within(part: str, max_bytes: int) -> list[tuple[str, str]]:
    """Render; if the HTML outgrows the limit (escaping, tables), split the part further."""
    formatted = markdown_to_html(part)
    if len(formatted.encode()) <= max_bytes or max_bytes < 1000:
        return [(part, formatted)]
    out: list[tuple[str, str]] = []
    for smaller in split_markdown(part, max_bytes // 2):
        out.extend(_render_within(smaller, max_bytes // 2))
    return out


# -- progress ------------------------------------------------------------------------------


def _steps_line(count: int, elapsed_s: float) -> str:
    steps = "step" if count == 1 else "steps"
    return f"{count} {steps} · {elapsed_s:.0f} s"


def progress_content(progress: Progress) -> JsonDict:
    """The live display: what the agent did so far (the last few steps) and for how long."""
    shown = progress.steps[-_MAX_STEPS_SHOWN:]
    hidden = len(progress.steps) - len(shown)
    head = f"Working… {_steps_line(len(progress.steps), progress.elapsed_s)}"
    plain = [head]
    items = []
    if hidden:
        plain.append(f"… {hidden} earlier")
        items.append(f"<li>… {hidden} earlier</li>")
    plain += [f"• {step}" for step in shown]
    items += [f"<li><code>{html.escape(step)}</code></li>" for step in shown]
    formatted = f"<p>{html.escape(head)}</p><ul>{''.join(items)}</ul>"
    return message_content("\n".join(plain), formatted, "m.notice")


def finished_content(reply: Reply, steps: int | None) -> JsonDict:
    """What the acknowledgement says once the reply is out. A stopped task (/stop, a limit)
    says Stopped; another reply without usage did not come from a finished run (a refusal):
    the display just ends, the reply says why."""
    word = (
        "Stopped"
        if reply.stopped
        else "Failed"
        if reply.is_error
        else "Done"
        if reply.usage
        else "Ended"
    )
    seconds = reply.usage.duration_s if reply.usage else None
    details = []
    if steps is not None:
        details.append(f"{steps} step" + ("" if steps == 1 else "s"))
    if seconds is not None:
        details.append(f"{seconds:.1f} s")
    text = " · ".join([word, *details])
    return message_content(text, html.escape(text), "m.notice")


def notice_content(text: str) -> JsonDict:
    return message_content(text, markdown_to_html(text), "m.notice")


# -- cards ---------------------------------------------------------------------------------


def card_content(card: Card, card_key: str) -> JsonDict:
    """A card: title, body, and how to press each button (react with its emoji). The
    buttons travel in the event under ``card_key`` so a reaction can be read back later."""
    buttons = [b for b in card.buttons if b.emoji]
    how = " · ".join(f"{b.emoji} {shown_as_text(b.label)}" for b in buttons)
    title = shown_as_text(card.title)
    plain = f"{title}\n\n{card.body}"
    formatted = f"<p><strong>{html.escape(title)}</strong></p>{markdown_to_html(card.body)}"
    if how:
        plain += f"\n\nReact with {how}"
        formatted += f"<p>React with {html.escape(how)}</p>"
    content = message_content(plain, formatted)  # m.text: the approver gets notified
    content[card_key] = {
        "buttons": [{"action_id": b.action_id, "emoji": b.emoji, "label": b.label} for b in buttons]
    }
    return content
