"""The Slack channel as the core sees it: authenticate and parse what the listener stored,
and answer in the message's thread.

A thread is a conversation: the first engaging message names it (team:channel:thread_ts)
and everything the bot says about it goes into that thread. The acknowledgement is one
message, edited in place (chat.update) into the live progress display and, at the end,
into a summary of the steps; the reply is posted as new messages (Slack notifies people of
new messages, not of edits), converted to mrkdwn and split below Slack's limits.

Exactly once: Slack has no idempotency key, so every post for a task goes through
``posts.py`` (a record before and after the call, the task id in the message's metadata).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway_bot.channels.slack import events, render
from gateway_bot.channels.slack.access import (
    Directory,
    SlackUser,
    foreign_team,
    is_allowed,
    refusal,
)
from gateway_bot.channels.slack.files import SlackFiles
from gateway_bot.channels.slack.listener import CHANNEL, SlackListener
from gateway_bot.channels.slack.posts import SlackPosts
from gateway_bot.channels.slack.records import SlackRecords
from gateway_bot.config.channels import SlackChannelSettings
from gateway_bot.core.channel import AuthenticationError
from gateway_bot.core.workspaces.inbox_files import InboxWriter
from gateway_bot.domain.messages import (
    Attachment,
    Card,
    Decision,
    InboundMessage,
    JsonDict,
    Progress,
    RawMessage,
    Reply,
    RoomInvite,
)
from gateway_bot.state.database import Database

log = logging.getLogger(__name__)


class SlackAdapter:
    name = CHANNEL

    def __init__(self, settings: SlackChannelSettings, state_dir: Path, database: Database) -> None:
        """``database``: the shared state database (open by the time the listener starts)."""
        self._settings = settings
        self._client = AsyncWebClient(token=settings.bot_token, base_url=settings.api_base_url)
        self._records = SlackRecords(database, legacy_path=state_dir / "slack" / "slack.db")
        self._directory = Directory(self._client)
        self._files = SlackFiles(
            self._client, self._records, settings.bot_token, settings.max_file_bytes
        )
        self._listener = SlackListener(settings, self._client, self._records)
        self._posts = SlackPosts(self._client, self._records)
        self.progress_interval_s = settings.progress_interval_seconds

    @property
    def listener(self) -> SlackListener:
        return self._listener

    # -- inbound -----------------------------------------------------------------------

    async def authenticate_and_parse(
        self, raw: RawMessage
    ) -> InboundMessage | Decision | RoomInvite:
        if raw.payload.get("kind") == "click":
            return await self._parse_click(raw, raw.payload["body"])
        if raw.payload.get("kind") == "joined":
            return await self._parse_added(raw, raw.payload["event"])
        event: dict[str, Any] = raw.payload["event"]
        team = str(raw.payload.get("team_id") or "")
        foreign = foreign_team(
            [team, event.get("user_team", ""), event.get("team", "")], self._settings
        )
        if foreign is not None or not team:
            raise AuthenticationError(raw.sender, f"event from another workspace ({foreign})")
        if not events.is_person_talking(event):
            raise AuthenticationError(raw.sender, "not a message typed by a person")
        user = await self._person(raw.sender)
        bot_user_id = str(raw.payload.get("bot_user_id") or "")
        direct = events.is_direct(event)
        channel = str(event["channel"])
        return InboundMessage(
            channel=CHANNEL,
            message_id=raw.message_id,
            sender_id=user.id,
            sender_name=user.name,
            body=events.slack_text_to_plain(
                events.strip_bot_mention(str(event.get("text") or ""), bot_user_id)
            ),
            conversation_key=events.conversation_key(team, event),
            received_at=raw.received_at,
            channel_context={
                "team": team,
                "channel": channel,
                "thread_ts": events.thread_root(event),
            },
            attachments=_attachments(event),
            sender_allowed=await self._allowed(user),
            room=channel,
            room_title=(
                f"DM with {user.name}"
                if direct
                else await self._directory.room_title(channel, channel)
            ),
            is_direct=direct,
            mentioned=events.mentions_bot(event, bot_user_id),
        )

    async def _parse_click(self, raw: RawMessage, body: dict[str, Any]) -> Decision:
        team = str((body.get("team") or {}).get("id") or "")
        clicker = body.get("user") or {}
        foreign = foreign_team([team, str(clicker.get("team_id") or "")], self._settings)
        if foreign is not None or not team:
            raise AuthenticationError(raw.sender, f"click from another workspace ({foreign})")
        actions = body.get("actions") or []
        if body.get("type") != "block_actions" or not actions:
            raise AuthenticationError(raw.sender, "not a button click")
        user = await self._person(str(clicker.get("id") or ""))
        action = actions[0]
        return Decision(
            channel=CHANNEL,
            action_id=str(action.get("action_id") or ""),
            decider_id=user.id,
            decider_name=user.name,
            decided_at=float(action.get("action_ts") or raw.received_at),
        )

    async def _parse_added(self, raw: RawMessage, event: dict[str, Any]) -> RoomInvite:
        team = str(raw.payload.get("team_id") or "")
        foreign = foreign_team([team, str(event.get("team") or "")], self._settings)
        if foreign is not None or not team:
            raise AuthenticationError(raw.sender, f"added from another workspace ({foreign})")
        channel = str(event["channel"])
        inviter = await self._person(raw.sender) if raw.sender else None
        return RoomInvite(
            channel=CHANNEL,
            room=channel,
            room_title=await self._directory.room_title(channel, channel),
            inviter_id=inviter.id if inviter else "",
            inviter_name=inviter.name if inviter else "someone (Slack named no inviter)",
            received_at=raw.received_at,
        )

    async def still_allowed(self, message: InboundMessage) -> bool:
        """Still a live person of our workspace and still allowed (users, groups, the
        whole workspace): a scheduled run replays a message parsed when it was made."""
        try:
            user = await self._person(message.sender_id)
        except AuthenticationError:
            return False
        return await self._allowed(user)

    async def _person(self, user_id: str) -> SlackUser:
        """The Slack user behind an event, refused if not a live person of our workspace."""
        if not user_id:
            raise AuthenticationError("unknown", "no user on the event")
        try:
            user = await self._directory.user(user_id)
        except SlackApiError as exc:
            if exc.response.status_code == 429 or exc.response.status_code >= 500:
                raise  # Slack is busy, not refusing: the core's retry policy tries again
            error = exc.response.get("error")
            raise AuthenticationError(user_id, f"users.info failed: {error}") from exc
        reason = refusal(user, self._settings)
        if reason is not None:
            raise AuthenticationError(user_id, reason, unauthorized=True)
        return user

    async def _allowed(self, user: SlackUser) -> bool:
        if self._settings.allow_workspace or user.id in self._settings.allowed_users:
            return True
        if not self._settings.allowed_user_groups:
            return False
        groups = self._settings.allowed_user_groups
        members = await self._directory.members_of(groups)
        return is_allowed(user.id, members, self._settings)

    async def save_attachments(self, message: InboundMessage, inbox: InboxWriter) -> list[str]:
        result = await self._files.download(message.attachments, inbox)
        if result.problems:
            await self._say(message.channel_context, ":paperclip: " + " ".join(result.problems))
        return result.saved

    # -- outbound ----------------------------------------------------------------------

    async def prepare_acknowledgement(self, context: JsonDict, task_id: str) -> None:
        """The acknowledgement's post intent, written while the message's flush runs; the
        post then needs no write of its own first. Unused (the conversation was full), it
        stays an unconfirmed intent, which posts nothing."""
        await self._posts.prepare_acknowledgement(task_id, str(context["channel"]))

    async def send_acknowledgement(self, context: JsonDict, task_id: str, text: str) -> None:
        await self._posts.post_once(
            task_id, "ack", 0, context, render.notice(":hourglass_flowing_sand:", text)
        )
        await self._records.join_thread(
            str(context.get("team") or ""), str(context["channel"]), _thread(context)
        )

    async def send_progress(self, context: JsonDict, progress: Progress) -> None:
        if progress.outcome is not None:
            await self._close_progress(progress.task_id, progress.outcome, progress.steps)
            return
        text = render.progress_from(progress)
        record = await self._records.post(progress.task_id, "ack", 0)
        if record is None or record.ts is None:
            await self._posts.post_once(progress.task_id, "ack", 0, context, text)
            return
        await self._client.chat_update(channel=record.channel, ts=record.ts, text=text)

    async def send_reply(self, context: JsonDict, task_id: str, reply: Reply) -> None:
        for part, text in enumerate(render.render_reply(reply)):
            await self._posts.post_once(task_id, "reply", part, context, text)
        problems = await self._files.upload(context, reply.files)
        if problems:
            await self._say(context, ":paperclip: " + " ".join(problems))

    async def _close_progress(self, task_id: str, reply: Reply, steps: tuple[str, ...]) -> None:
        """Turn the acknowledgement into the outcome and the steps taken (the core's), once:
        a second close after a restart knows no steps, and would erase them."""
        ack = await self._records.post(task_id, "ack", 0)
        closed = await self._records.post(task_id, "closed", 0)
        if ack is None or ack.ts is None or (closed is not None and closed.ts is not None):
            return
        await self._records.intend_post(task_id, "closed", 0, ack.channel)
        try:
            await self._client.chat_update(
                channel=ack.channel, ts=ack.ts, text=render.done_text(reply, steps)
            )
        except SlackApiError as exc:  # the reply is out; a stale progress line is cosmetic
            log.warning("could not close the progress message of %s: %s", task_id, exc)
        await self._records.confirm_post(task_id, "closed", 0, ack.ts)

    async def send_rejection(self, context: JsonDict, text: str) -> None:
        await self._post_mrkdwn(context, f":no_entry_sign: {render.to_mrkdwn(text)}")

    async def send_card(self, context: JsonDict, card: Card) -> str:
        channel = str(context["channel"])
        response = await self._client.chat_postMessage(
            channel=channel,
            thread_ts=context.get("thread_ts") or None,
            text=render.card_fallback(card),
            blocks=render.card_blocks(card),
        )
        return f"{channel}:{response['ts']}"

    async def update_card(self, context: JsonDict, card_ref: str, card: Card) -> None:
        """A decided card comes without buttons; a pending one (edited to quote more held
        messages) keeps them."""
        channel, _, ts = card_ref.partition(":")
        await self._client.chat_update(
            channel=channel,
            ts=ts,
            text=render.card_fallback(card),
            blocks=render.card_blocks(card),
        )

    async def join_room(self, room: str) -> None:
        """The bot is in the channel already (Slack adds apps directly); joining matters only
        for a public channel it left, and fails harmlessly for the rest."""
        try:
            await self._client.conversations_join(channel=room)
        except SlackApiError as exc:
            log.info("conversations.join %s: %s", room, exc.response.get("error"))

    async def leave_room(self, room: str) -> None:
        try:
            await self._client.conversations_leave(channel=room)
        except SlackApiError as exc:
            log.warning("could not leave %s: %s", room, exc.response.get("error"))

    async def _say(self, context: JsonDict, text: str) -> None:
        """Post plain text (file problems, notices): escaped here, so the names of files
        and people in it stay text and never become mentions or links."""
        await self._post_mrkdwn(context, render.escape(text))

    async def _post_mrkdwn(self, context: JsonDict, mrkdwn: str) -> None:
        """Post mrkdwn that ``render`` built (every piece of text in it escaped)."""
        await self._client.chat_postMessage(
            channel=str(context["channel"]),
            thread_ts=context.get("thread_ts") or None,
            text=mrkdwn,
            unfurl_links=False,
            unfurl_media=False,
        )


def _attachments(event: dict[str, Any]) -> tuple[Attachment, ...]:
    found = []
    for shared in event.get("files") or []:
        if shared.get("mode") in ("tombstone", "hidden_by_limit"):
            continue
        found.append(
            Attachment(
                filename=str(shared.get("name") or shared.get("title") or shared.get("id")),
                content_type=str(shared.get("mimetype") or "application/octet-stream"),
                size=int(shared.get("size") or 0),
                source_ref=str(
                    shared.get("url_private_download") or shared.get("url_private") or ""
                ),
            )
        )
    return tuple(found)


def _thread(context: JsonDict) -> str:
    return str(context.get("thread_ts") or "")
