"""Files in and out: size-limited downloads into the inbox (named by core.inbox_files),
outbox uploads; encrypted attachments (AES-CTR, checked by SHA-256) in encrypted rooms.

An encrypted file's ``Attachment.source_ref`` is the JSON of its ``file`` object (url, key,
iv, hashes): the key travels with the message the core stores, as it did in the event.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nio import EncryptionError

from gateway_bot.channels.matrix.api import FileTooLarge, MatrixError
from gateway_bot.core.workspaces.inbox_files import (
    InboxError,
    InboxWriter,
    safe_filename,
    size_text,
)
from gateway_bot.domain.messages import Attachment

if TYPE_CHECKING:
    from gateway_bot.channels.matrix.session import MatrixSession

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class SaveOutcome:
    saved: list[str]
    problems: list[str]
    """One sentence per file that was not saved, for the sender."""


def encrypted_file_of(source_ref: str) -> JsonDict | None:
    """The ``file`` object of an encrypted attachment, None for a plain ``mxc://`` one."""
    if not source_ref.startswith("{"):
        return None
    info = json.loads(source_ref)
    return info if isinstance(info, dict) else None


async def _save_encrypted(
    session: MatrixSession, file_info: JsonDict, inbox: InboxWriter, name: str, max_bytes: int
) -> str:
    """Download the ciphertext whole (the hash is over all of it), check and decrypt it,
    and only then write the plaintext: nothing unverified reaches the inbox."""
    chunks: list[bytes] = []

    async def keep(chunk: bytes) -> None:
        chunks.append(chunk)

    # AES-CTR adds no padding: the ciphertext is as large as the file.
    await session.api.download(str(file_info.get("url", "")), keep, max_bytes)
    plain = await asyncio.to_thread(session.e2ee.decrypt_file, b"".join(chunks), file_info)
    async with inbox.receive(name) as incoming:
        await incoming.write(plain)
    return incoming.saved_name


async def save_attachments(
    session: MatrixSession,
    attachments: tuple[Attachment, ...],
    inbox: InboxWriter,
    max_bytes: int,
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
            file_info = encrypted_file_of(attachment.source_ref)
            if file_info is not None:
                saved.append(await _save_encrypted(session, file_info, inbox, name, max_bytes))
                continue
            async with inbox.receive(name) as incoming:
                await session.api.download(attachment.source_ref, incoming.write, max_bytes)
        except FileTooLarge:
            problems.append(f"{name} is over the {limit} limit for files and was not downloaded.")
            continue
        except MatrixError as exc:
            problems.append(f"{name} could not be downloaded ({exc}).")
            continue
        except EncryptionError as exc:
            problems.append(f"{name} could not be decrypted ({exc}).")
            continue
        except InboxError as exc:
            problems.append(f"{name} could not be saved: {exc}.")
            continue
        saved.append(incoming.saved_name)
    return SaveOutcome(saved, problems)


def _msgtype_for(mimetype: str) -> str:
    major = mimetype.split("/", 1)[0]
    return {"image": "m.image", "audio": "m.audio", "video": "m.video"}.get(major, "m.file")


async def upload_file(session: MatrixSession, room_id: str, path: Path, max_bytes: int) -> JsonDict:
    """Upload a file from the outbox (encrypted when the room is); the content of the
    message that posts it. Raises MatrixError (M_TOO_LARGE) for a file over the limit,
    before reading it."""
    size = (await asyncio.to_thread(path.stat)).st_size
    if size > max_bytes:
        limit = size_text(max_bytes)
        raise MatrixError(413, "M_TOO_LARGE", f"{size_text(size)} is over the {limit} limit")
    mimetype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    data = await asyncio.to_thread(path.read_bytes)
    content: JsonDict = {
        "msgtype": _msgtype_for(mimetype),
        "body": path.name,
        "filename": path.name,
        "info": {"size": len(data), "mimetype": mimetype},
    }
    if session.e2ee.available and session.e2ee.room_encrypted(room_id):
        ciphertext, keys = await asyncio.to_thread(session.e2ee.encrypt_file, data)
        uri = await session.api.upload(ciphertext, "application/octet-stream", "")
        content["file"] = {"url": uri, "mimetype": mimetype, **keys}
    else:
        content["url"] = await session.api.upload(data, mimetype, path.name)
    return content
