"""Files in and out: shared files are downloaded into the conversation's inbox with the bot
token; outbox files are uploaded to the thread (files.getUploadURLExternal, the upload,
files.completeUploadExternal: ``files_upload_v2``).

Each outbox file goes to a thread once. The outbox outlives a task, so the same file is
offered again with later replies; an upload is recorded per (thread, name, content hash)
and a changed file is uploaded again. As with posts, the record is written before the
upload and confirmed after, and an unconfirmed one is looked for in the thread first.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.channels.slack.records import SlackRecords
from gateway_bot.channels.slack.webapi import next_cursor
from gateway_bot.core.inbox_files import safe_filename, size_text, unused_path
from gateway_bot.core.messages import Attachment, JsonDict

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")
_MB = 1024 * 1024


@dataclass(frozen=True)
class Downloaded:
    saved: list[str]
    problems: list[str]
    """One human sentence per file the agent will not get."""


class SlackFiles:
    def __init__(
        self, client: AsyncWebClient, records: SlackRecords, bot_token: str, max_bytes: int
    ) -> None:
        self._client = client
        self._records = records
        self._token = bot_token
        self._max_bytes = max_bytes

    # -- in ----------------------------------------------------------------------------

    async def download(self, attachments: tuple[Attachment, ...], inbox: Path) -> Downloaded:
        saved: list[str] = []
        problems: list[str] = []
        headers = {"Authorization": f"Bearer {self._token}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            for attachment in attachments:
                if attachment.size > self._max_bytes:
                    problems.append(self._too_big(attachment.filename, attachment.size))
                    continue
                try:
                    data = await self._fetch(session, attachment)
                except _FetchError as exc:
                    problems.append(f"{attachment.filename}: {exc}")
                    continue
                path = unused_path(inbox, safe_filename(attachment.filename))
                await asyncio.to_thread(_write, path, data)
                saved.append(path.name)
        return Downloaded(saved, problems)

    async def _fetch(self, session: aiohttp.ClientSession, attachment: Attachment) -> bytes:
        if not attachment.source_ref.startswith(("https://", "http://")):
            raise _FetchError("Slack gave no download link (is it an external file?)")
        try:
            async with session.get(attachment.source_ref) as response:
                if response.status != 200:
                    raise _FetchError(f"download failed (HTTP {response.status})")
                if response.content_type == "text/html" and not attachment.filename.endswith(
                    (".html", ".htm")
                ):
                    raise _FetchError("Slack answered with a login page: add the files:read scope")
                data = bytearray()
                async for chunk in response.content.iter_chunked(256 * 1024):
                    data += chunk
                    if len(data) > self._max_bytes:
                        raise _FetchError(self._too_big(attachment.filename, len(data)))
                return bytes(data)
        except aiohttp.ClientError as exc:
            raise _FetchError(f"download failed ({exc})") from exc

    def _too_big(self, name: str, size: int) -> str:
        return (
            f"{name} is {size_text(size)}, over the {size_text(self._max_bytes)} limit "
            "(channels.slack.max_file_bytes); the agent did not get it"
        )

    # -- out ---------------------------------------------------------------------------

    async def upload(self, context: JsonDict, paths: tuple[str, ...]) -> list[str]:
        """Upload each file the thread has not had yet; return problems to tell the user."""
        channel = str(context["channel"])
        thread = str(context.get("thread_ts") or "")
        problems: list[str] = []
        for path_text in paths:
            path = Path(path_text)
            size = (await asyncio.to_thread(path.stat)).st_size
            if size > self._max_bytes:
                problems.append(self._too_big(path.name, size).replace("the agent did", "you did"))
                continue
            data = await asyncio.to_thread(path.read_bytes)
            digest = hashlib.sha256(data).hexdigest()
            record = await self._records.upload(channel, thread, path.name, digest)
            if record is not None and record.file_id:
                continue
            if record is not None:
                found = await self._find_upload(channel, thread, path.name, record.intended_at)
                if found is not None:
                    await self._records.confirm_upload(channel, thread, path.name, digest, found)
                    continue
            else:
                await self._records.intend_upload(channel, thread, path.name, digest)
            response = await self._client.files_upload_v2(
                channel=channel,
                thread_ts=thread or None,
                content=data,
                filename=path.name,
                title=path.name,
            )
            file_id = str((response.get("file") or {}).get("id") or "uploaded")
            await self._records.confirm_upload(channel, thread, path.name, digest, file_id)
        return problems

    async def _find_upload(self, channel: str, thread: str, name: str, since: float) -> str | None:
        """A file of this name shared in the thread since we meant to upload it."""
        if not thread:
            return None
        cursor: str | None = None
        while True:
            response = await self._client.conversations_replies(
                channel=channel, ts=thread, oldest=f"{since - 5:.6f}", limit=200, cursor=cursor
            )
            for message in response.get("messages") or []:
                for shared in message.get("files") or []:
                    if shared.get("name") == name or shared.get("title") == name:
                        return str(shared.get("id") or "found")
            cursor = next_cursor(response)
            if not cursor:
                return None


class _FetchError(Exception):
    pass


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
