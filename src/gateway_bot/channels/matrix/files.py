"""Files in and out: size-limited downloads into the inbox (named by core.inbox_files),
outbox uploads."""

from __future__ import annotations

import asyncio
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway_bot.channels.matrix.api import FileTooLarge, MatrixApi, MatrixError
from gateway_bot.core.inbox_files import InboxError, InboxWriter, safe_filename, size_text
from gateway_bot.domain.messages import Attachment

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class SaveOutcome:
    saved: list[str]
    problems: list[str]
    """One sentence per file that was not saved, for the sender."""


async def save_attachments(
    api: MatrixApi, attachments: tuple[Attachment, ...], inbox: InboxWriter, max_bytes: int
) -> SaveOutcome:
    saved: list[str] = []
    problems: list[str] = []
    limit = size_text(max_bytes)
    for attachment in attachments:
        name = safe_filename(attachment.filename)
        if attachment.size > max_bytes:
            problems.append(
                f"{name} ({size_text(attachment.size)}) is over the {limit} limit for files "
                "and was not downloaded."
            )
            continue
        try:
            async with inbox.receive(name) as incoming:
                await api.download(attachment.source_ref, incoming.write, max_bytes)
        except FileTooLarge:
            problems.append(f"{name} is over the {limit} limit for files and was not downloaded.")
            continue
        except MatrixError as exc:
            problems.append(f"{name} could not be downloaded ({exc}).")
            continue
        except InboxError as exc:
            problems.append(f"{name} could not be saved: {exc}.")
            continue
        saved.append(incoming.saved_name)
    return SaveOutcome(saved, problems)


def _msgtype_for(mimetype: str) -> str:
    major = mimetype.split("/", 1)[0]
    return {"image": "m.image", "audio": "m.audio", "video": "m.video"}.get(major, "m.file")


async def upload_file(api: MatrixApi, path: Path, max_bytes: int) -> JsonDict:
    """Upload a file from the outbox; the content of the message that posts it.
    Raises MatrixError (M_TOO_LARGE) for a file over the limit, before reading it."""
    size = (await asyncio.to_thread(path.stat)).st_size
    if size > max_bytes:
        limit = size_text(max_bytes)
        raise MatrixError(413, "M_TOO_LARGE", f"{size_text(size)} is over the {limit} limit")
    mimetype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    data = await asyncio.to_thread(path.read_bytes)
    uri = await api.upload(data, mimetype, path.name)
    return {
        "msgtype": _msgtype_for(mimetype),
        "body": path.name,
        "filename": path.name,
        "url": uri,
        "info": {"size": len(data), "mimetype": mimetype},
    }
