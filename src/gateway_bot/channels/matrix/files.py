"""Files in and out: safe inbox names, size-limited downloads, outbox uploads.

A sender chooses a file's name; the agent then sees it as a path. Names are therefore cut
to a plain basename of safe characters, and never overwrite an earlier file in the inbox.
"""

from __future__ import annotations

import asyncio
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway_bot.channels.matrix.api import FileTooLarge, MatrixApi, MatrixError
from gateway_bot.core.messages import Attachment

JsonDict = dict[str, Any]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_MAX_NAME = 100


def safe_filename(name: str) -> str:
    """A basename of ``[A-Za-z0-9._+-]`` that does not start with a dot, at most 100
    characters, keeping the extension when it has to shorten."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).strip("._") or "file"
    if len(base) > _MAX_NAME:
        stem, dot, suffix = base.rpartition(".")
        if dot and 0 < len(suffix) <= 10:
            base = f"{stem[: _MAX_NAME - len(suffix) - 1]}.{suffix}"
        else:
            base = base[:_MAX_NAME]
    return base


def unused_path(directory: Path, name: str) -> Path:
    """``name`` in ``directory``, or ``stem-2.ext``, ``stem-3.ext``... if it is taken."""
    candidate = directory / name
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        stem, suffix = name, ""
    number = 2
    while candidate.exists() or candidate.with_name(candidate.name + ".partial").exists():
        candidate = directory / (f"{stem}-{number}.{suffix}" if suffix else f"{stem}-{number}")
        number += 1
    return candidate


@dataclass(frozen=True)
class SaveOutcome:
    saved: list[str]
    problems: list[str]
    """One sentence per file that was not saved, for the sender."""


def size_text(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    if size >= 1_000:
        return f"{size / 1_000:.0f} KB"
    return f"{size} bytes"


async def save_attachments(
    api: MatrixApi, attachments: tuple[Attachment, ...], inbox: Path, max_bytes: int
) -> SaveOutcome:
    await asyncio.to_thread(inbox.mkdir, parents=True, exist_ok=True)
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
        destination = unused_path(inbox, name)
        try:
            await api.download(attachment.source_ref, destination, max_bytes)
        except FileTooLarge:
            problems.append(f"{name} is over the {limit} limit for files and was not downloaded.")
            continue
        except MatrixError as exc:
            problems.append(f"{name} could not be downloaded ({exc}).")
            continue
        saved.append(destination.name)
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
