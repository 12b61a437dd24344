"""Outgoing mail: the agent's markdown as text + HTML, threaded under the mail it answers.

Threading headers follow RFC 5322: In-Reply-To names the answered mail, References is
the thread's chain (capped, oldest dropped), the subject is ``Re: [ID:thread] original`` so
a client that drops headers still finds the conversation. Our Message-IDs are
``<gwb.{thread}.{timestamp}@{domain}>``: a reply to any of them names its thread.

The HTML is rendered by markdown-it with raw HTML off: whatever the agent writes (or was
made to write) stays text in the mail, never markup.
"""

from __future__ import annotations

import errno
import html
import mimetypes
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererProtocol
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from gateway_bot.core.workspaces.inbox_files import safe_filename

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")


def _image_as_link(
    renderer: RendererProtocol,
    tokens: Sequence[Token],
    idx: int,
    options: OptionsDict,
    env: EnvType,
) -> str:
    """Never an ``<img>``: a mail client loads it when the mail is opened, so the agent
    (or whoever wrote into what it read) could send workspace secrets to any host in a
    URL, past the sandbox's egress allowlist. An image becomes a link the user may click
    (like Matrix's renderer does for sources off the homeserver)."""
    token = tokens[idx]
    src = str(token.attrs.get("src", ""))
    label = html.escape("".join(child.content for child in token.children or ()) or src)
    if src.startswith(("https://", "http://")):
        return f'<a href="{html.escape(src)}">{label}</a>'
    return label


_MARKDOWN.add_render_rule("image", _image_as_link)
MAX_REFERENCES = 20


@dataclass(frozen=True)
class Outgoing:
    """Who gets it and how it threads; built from the channel context of the answered mail."""

    sender: str
    recipient: str
    subject: str
    thread: str
    in_reply_to: str
    references: tuple[str, ...]
    opens_thread: bool = False
    """The first mail of a thread (``/mail``): its subject is not a reply's."""


def new_message_id(thread: str, domain: str) -> str:
    return f"<gwb.{thread}.{int(time.time() * 1000)}@{domain}>"


def reply_subject(thread: str, subject: str) -> str:
    return f"Re: [ID:{thread}] {subject}"


def opening_subject(thread: str, subject: str) -> str:
    return f"[ID:{thread}] {subject}"


def build_mail(
    outgoing: Outgoing,
    message_id: str,
    markdown_text: str,
    footer: str = "",
    files: tuple[tuple[str, bytes], ...] = (),
) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = outgoing.sender
    mail["To"] = outgoing.recipient
    subject = opening_subject if outgoing.opens_thread else reply_subject
    mail["Subject"] = subject(outgoing.thread, outgoing.subject)
    mail["Message-ID"] = message_id
    mail["Date"] = formatdate(localtime=False)
    if outgoing.in_reply_to:
        mail["In-Reply-To"] = outgoing.in_reply_to
    references = list(outgoing.references)[-MAX_REFERENCES:]
    if references:
        mail["References"] = " ".join(references)
    mail["Auto-Submitted"] = "auto-replied"
    text = markdown_text.rstrip() + (f"\n\n-- \n{footer}" if footer else "") + "\n"
    mail.set_content(text)
    body_html = _MARKDOWN.render(markdown_text)
    if footer:
        body_html += f'<p style="color:#777;font-size:small">{html.escape(footer)}</p>'
    mail.add_alternative(f"<!DOCTYPE html><html><body>{body_html}</body></html>", subtype="html")
    for name, data in files:
        maintype, _, subtype = (
            mimetypes.guess_type(name)[0] or "application/octet-stream"
        ).partition("/")
        mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return mail


def read_files(paths: tuple[str, ...], max_bytes: int) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The outbox files to attach (``sent/<task>/``, written by the daemon), and a sentence
    for each one left out. The agent chose the names: they go out sanitised (a CR/LF in a
    filename would make the whole reply unbuildable, a bidi override would disguise the
    extension), and a file is opened no-follow, as a regular file, never through a link."""
    files: list[tuple[str, bytes]] = []
    problems: list[str] = []
    for path_text in paths:
        path = Path(path_text)
        name = safe_filename(path.name)
        try:
            data = _read_regular(path, max_bytes)
        except OSError as exc:
            problems.append(f"{name} could not be read ({exc.strerror or exc}).")
            continue
        if data is None:
            problems.append(f"{name} is over the attachment limit.")
            continue
        files.append((name, data))
    return files, problems


def _read_regular(path: Path, max_bytes: int) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = file.read(max_bytes + 1)
    return None if len(data) > max_bytes else data
