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
from yarl import URL

from gateway_bot.channels.slack.records import SlackRecords
from gateway_bot.channels.slack.webapi import next_cursor
from gateway_bot.core.workspaces.inbox_files import InboxError, InboxWriter, size_text
from gateway_bot.domain.messages import Attachment, JsonDict

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


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
        self._api_origin = _origin(URL(client.base_url))
        """Where ``channels.slack.api_base_url`` points (a fake Slack in tests): its file
        links get the token too."""

    # -- in ----------------------------------------------------------------------------

    async def download(self, attachments: tuple[Attachment, ...], inbox: InboxWriter) -> Downloaded:
        saved: list[str] = []
        problems: list[str] = []
        async with aiohttp.ClientSession() as session:  # _fetch adds the token per request
            for attachment in attachments:
                if attachment.size > self._max_bytes:
                    problems.append(self._too_big(attachment.filename, attachment.size))
                    continue
                try:
                    data = await self._fetch(session, attachment)
                except _FetchError as exc:
                    problems.append(f"{attachment.filename}: {exc}")
                    continue
                try:
                    saved.append(await inbox.save(attachment.filename, data))
                except InboxError as exc:
                    problems.append(f"{attachment.filename}: {exc}")
        return Downloaded(saved, problems)

    async def _fetch(self, session: aiohttp.ClientSession, attachment: Attachment) -> bytes:
        """The file's bytes, from Slack only. The bot token goes with each request, and
        so only to Slack's own file hosts (or the configured API's origin): an external
        file's link, or a redirect off Slack, is refused before anything is sent there
        (downloading it without the token would still have the host fetch any address a
        remote file names). Redirects are followed here, each hop checked."""
        if not attachment.source_ref.startswith(("https://", "http://")):
            raise _FetchError("Slack gave no download link (is it an external file?)")
        url = URL(attachment.source_ref)
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            for hop in range(_MAX_REDIRECTS + 1):
                if not _is_slack_file_host(url, self._api_origin):
                    where = "the link points" if hop == 0 else "the download was redirected"
                    raise _FetchError(
                        f"{where} outside Slack ({url.host}); the bot downloads only files "
                        "stored in Slack, so the agent did not get it"
                    )
                async with session.get(url, headers=headers, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status in _REDIRECTS and location:
                        url = url.join(URL(location))
                        continue
                    if response.status != 200:
                        raise _FetchError(f"download failed (HTTP {response.status})")
                    if response.content_type == "text/html" and not attachment.filename.endswith(
                        (".html", ".htm")
                    ):
                        raise _FetchError(
                            "Slack answered with a login page: add the files:read scope"
                        )
                    data = bytearray()
                    async for chunk in response.content.iter_chunked(256 * 1024):
                        data += chunk
                        if len(data) > self._max_bytes:
                            raise _FetchError(self._too_big(attachment.filename, len(data)))
                    return bytes(data)
            raise _FetchError("download failed (too many redirects)")
        except (aiohttp.ClientError, ValueError) as exc:
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


_SLACK_DOMAIN = "slack.com"
"""Slack serves shared files from files.slack.com; any host of slack.com is Slack's own.
Not slack-edge.com (public assets, no token needed) and never plain http."""
_MAX_REDIRECTS = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _origin(url: URL) -> tuple[str, str, int | None]:
    return (url.scheme.lower(), (url.host or "").lower(), url.port)


def _is_slack_file_host(url: URL, api_origin: tuple[str, str, int | None]) -> bool:
    """May the bot token go to ``url``? Only over https to slack.com or a subdomain of
    it, or to exactly the origin of the configured API base URL."""
    if not url.absolute:
        return False
    if _origin(url) == api_origin:
        return True
    host = (url.host or "").lower().rstrip(".")
    return (
        url.scheme.lower() == "https"
        and url.port == 443
        and (host == _SLACK_DOMAIN or host.endswith("." + _SLACK_DOMAIN))
    )
