"""Hears the bot's rooms through /sync and hands each new message to the core.

Exactly once, across restarts: a batch's events are submitted in timeline order, and only
when every one is durably stored does the sync token (with the set of joined rooms) move
past them. A crash re-reads the batch; the core ignores event ids it already holds. When a
timeline comes back ``limited`` (more happened than one response carries, typically while
the daemon was down), the gap back to the previous token is read with /messages.

Never replayed as tasks: anything before the first sync of a fresh state, and, in a room
joined within a batch, anything before the bot's own join.

The sync goes through matrix-nio, which decrypts, tracks devices and rooms as a side
effect; after each sync the listener does nio's key chores (``crypto.E2ee.chores``) before
it handles the batch, so device lists are current when answers go out. Encrypted messages
are decrypted here and submitted as plain event JSON; one whose keys never came is kept
(``undecrypted``), its keys requested, its sender told once after
``e2ee.undecryptable_notice_s``, and it is submitted as soon as the keys arrive.

Also here: invites (joined when the inviter is allowed, otherwise handed to the core as a
RoomInvite for its approval policy), the "cannot read encrypted rooms" notice when
encryption is off, and health (DEGRADED with exponential back-off while syncs fail or
messages stay undecryptable; FAILED when the credentials are refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from gateway_bot.channels.matrix.api import MatrixError
from gateway_bot.channels.matrix.encrypted_intake import EncryptedIntake
from gateway_bot.channels.matrix.events import (
    EventKind,
    classify,
    invite_details,
    invite_of,
    new_timeline_events,
    reaction_of,
    user_allowed,
)
from gateway_bot.channels.matrix.members import RoomMembers
from gateway_bot.channels.matrix.render import in_conversation, notice_content
from gateway_bot.channels.matrix.session import LoginRefused, MatrixSession
from gateway_bot.channels.matrix.sync_filter import stored_filter, sync_filter
from gateway_bot.core.channel import Submit
from gateway_bot.core.fault_points import reached
from gateway_bot.domain.messages import ChannelHealth, ChannelStatus, RawMessage

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

_GAP_PAGES = 20
_MAX_BACKOFF_S = 60.0
ANSWERS_WAIT_S = 0.5
"""How long the next poll waits for the answers (acknowledgement, refusal, card) to a
batch's messages: they normally go out within tens of ms; a message that gets none (a
duplicate, a reaction from someone else) must not hold the room's next message up longer."""
ANSWER_STARTS_S = 0.15
"""... and not even that long when no answer has started by then (chatter in a group room
that engages nobody): an acknowledgement starts within tens of ms of the batch."""
ECHO_GRACE_S = 0.1
"""Then, when one of those answers acknowledged a task, this long again, while people's
clients fetch it (sends.py)."""

ENCRYPTED_NOTICE = (
    "I cannot read end-to-end encrypted rooms here (encryption is turned off in my "
    "configuration), so I did not see that message. Please talk to me in a room without "
    "encryption (encryption cannot be turned off once it is on: create a new room with "
    "encryption disabled and invite me there), or ask my operator to enable it."
)


class MatrixListener:
    def __init__(self, session: MatrixSession, channel: str) -> None:
        self._session = session
        self._channel = channel
        self._status = ChannelStatus(ChannelHealth.STARTING)
        self._submit: Submit | None = None
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._next_batch: str | None = None
        self._joined: set[str] = set()
        self._filter = sync_filter(session.settings.sync_timeline_limit)
        self._filter_id: str | None = None
        self._handed_on = False  # the batch being handled handed a message to the core
        self._full_state = True
        self.members = RoomMembers()
        """Who is joined where, as the syncs say (``members.py``): the adapter's
        authentication reads it instead of asking the homeserver per message."""
        self._encrypted = EncryptedIntake(session, self._on_event)
        self._undecrypted_ticker: asyncio.Task[None] | None = None

    @property
    def status(self) -> ChannelStatus:
        """The sync's health; a connected channel with messages undecryptable past the
        notice time is DEGRADED until their keys arrive."""
        stuck = self._encrypted.stuck
        if self._status.health is ChannelHealth.CONNECTED and stuck:
            return ChannelStatus(
                ChannelHealth.DEGRADED,
                f"{stuck} encrypted message(s) cannot be decrypted: their Megolm "
                "keys never reached the bot (asked the senders' devices for them)",
            )
        return self._status

    async def start(self, submit: Submit) -> None:
        self._submit = submit
        self._stopping.clear()
        self._loop_task = asyncio.create_task(self._run(), name="matrix-sync")
        self._undecrypted_ticker = asyncio.create_task(
            self._encrypted.keep_retrying(), name="matrix-undecrypted"
        )

    async def stop(self) -> None:
        """Stop after the batch in hand (a long poll is abandoned at once), so no
        half-submitted batch is cut short; the HTTP session closes once it is idle."""
        self._stopping.set()
        if self._loop_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._loop_task), 30)
            except TimeoutError:
                self._loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._loop_task
        self.members.lost()  # no sync keeps them current any more
        if self._undecrypted_ticker is not None:
            self._undecrypted_ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._undecrypted_ticker
        await self._session.api.retire()

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                if not self._session.logged_in:
                    self.members.lost()
                    await self._session.log_in()
                    position = await self._session.store.load_position(self._session.user_id)
                    self._next_batch = position.next_batch
                    self._joined = set(position.joined_rooms)
                full_state = self._full_state
                if self._filter_id is None:
                    self._filter_id = await stored_filter(
                        self._session.api, self._session.user_id, self._filter
                    )
                response = await self._poll()
                if response is None:
                    return
                self._session.mark_synced()
                await self._session.e2ee.chores()
                await self._session.cross_sign()
                sent_before = self._session.sends.mark()
                await self._handle_batch(response, full_state)
                # Only once the batch was handled: a retry after a failure above asks for
                # the full state again, or every room's membership would stay unknown.
                self._full_state = False
                await self._encrypted.retry_kept()
                if self._handed_on:
                    self._handed_on = False  # poll once their answers are out (sends.py)
                    sends = self._session.sends
                    settled = await sends.settled_since(
                        sent_before, ANSWER_STARTS_S, ANSWERS_WAIT_S
                    )
                    if settled and sends.acknowledged_since(sent_before):
                        await asyncio.sleep(ECHO_GRACE_S)
            except LoginRefused as exc:
                self.members.lost()
                log.error("matrix: %s", exc)
                self._status = ChannelStatus(ChannelHealth.FAILED, f"login refused: {exc}")
                return
            except MatrixError as exc:
                self.members.lost()
                if exc.status in (400, 404) and self._filter_id != self._filter:
                    self._filter_id = None  # a stored filter it forgot (a restored database)
                if exc.status == 401 and exc.errcode == "M_UNKNOWN_TOKEN":
                    try:
                        await self._session.token_lost()
                    except LoginRefused as refused:
                        self._status = ChannelStatus(ChannelHealth.FAILED, str(refused))
                        return
                backoff = await self._degraded(f"sync failed: {exc}", backoff)
                continue
            except Exception as exc:
                self.members.lost()
                log.exception("matrix: handling a sync batch failed")
                backoff = await self._degraded(f"sync batch failed: {exc!r}", backoff)
                continue
            backoff = 1.0
            if self._status.health is not ChannelHealth.CONNECTED:
                log.info("matrix: syncing as %s", self._session.user_id)
                self._status = ChannelStatus(
                    ChannelHealth.CONNECTED, f"syncing as {self._session.user_id}"
                )

    async def _degraded(self, reason: str, backoff: float) -> float:
        log.warning("matrix: %s; retrying in %.0f s", reason, backoff)
        self._status = ChannelStatus(
            ChannelHealth.DEGRADED, f"{reason}; retrying in {backoff:.0f} s"
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), backoff)
        return min(backoff * 2, _MAX_BACKOFF_S)

    async def _poll(self) -> JsonDict | None:
        """One /sync long poll, abandoned (None) when the listener is stopped."""
        timeout_ms = int(self._session.settings.sync_timeout_seconds * 1000)
        if self._next_batch is None:
            timeout_ms = 0  # the first sync returns at once anyway
        poll = asyncio.create_task(
            self._session.api.sync(
                self._next_batch, timeout_ms, self._filter_id or self._filter, self._full_state
            )
        )
        stop = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not poll.done():
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError, MatrixError):
                await poll
            return None
        stop.cancel()
        raw, _parsed = poll.result()
        return raw

    # -- one batch -----------------------------------------------------------------------

    async def _handle_batch(self, response: JsonDict, full_state: bool) -> None:
        since = self._next_batch
        # Members first: the batch's messages are authenticated against its end state.
        self.members.follow(response, full_state=full_state, known_rooms=self._joined)
        rooms = response.get("rooms") or {}
        for room_id, invited in (rooms.get("invite") or {}).items():
            state = (invited.get("invite_state") or {}).get("events") or []
            await self._on_invite(room_id, state, since)
        joined_now: list[str] = []
        for room_id, joined in (rooms.get("join") or {}).items():
            timeline = joined.get("timeline") or {}
            events: list[JsonDict] = list(timeline.get("events") or [])
            if since is not None:
                if timeline.get("limited") and timeline.get("prev_batch"):
                    events = await self._fill_gap(room_id, timeline["prev_batch"], since) + events
                known = room_id in self._joined
                for event in new_timeline_events(
                    events, self._session.user_id, joined_before=known
                ):
                    await self._on_event(room_id, event)
            joined_now.append(room_id)
        left = list((rooms.get("leave") or {}).keys())
        next_batch = str(response["next_batch"])
        await self._session.store.save_position(self._session.user_id, next_batch, joined_now, left)
        reached("matrix_sync_saved")
        self._next_batch = next_batch
        for room_id in joined_now:
            if since is not None and room_id not in self._joined:
                self._session.e2ee.prepare(room_id)  # just joined: the first answer only encrypts
        self._joined.update(joined_now)
        self._joined.difference_update(left)

    async def _fill_gap(self, room_id: str, prev_batch: str, since: str) -> list[JsonDict]:
        """The events between the previous sync token and a limited timeline, oldest first."""
        collected: list[JsonDict] = []
        token = prev_batch
        for _ in range(_GAP_PAGES):
            page = await self._session.api.messages(room_id, token, since, limit=100)
            chunk = page.get("chunk") or []
            collected.extend(chunk)
            end = page.get("end")
            if not chunk or not end or end == token:
                break
            token = str(end)
        else:
            log.warning(
                "matrix: %s: more than %d events missed; older ones skipped",
                room_id,
                len(collected),
            )
        if collected:
            log.info("matrix: %s: read %d missed events", room_id, len(collected))
        return list(reversed(collected))

    async def _on_invite(
        self, room_id: str, invite_state: list[JsonDict], since: str | None
    ) -> None:
        """Join at once when an allowed user invites; hand any other invite to the core
        (as a RoomInvite), whose policy cards an owner or declines it."""
        invite = invite_of(invite_state, self._session.user_id)
        if invite is None:
            return
        inviter, direct = invite
        if not user_allowed(inviter, self._session.settings.allowed_users):
            # A stranger's "direct" flag is not believed: a room marked direct engages the
            # bot with every message, so an owner who lets the bot join a stranger's group
            # would have its chatter carded and its allowed members' every line run. A real
            # two-person room counts as direct by its members anyway. The claim goes to the
            # owner's card only, as a request to talk: Join then admits the inviter too.
            await self._accept(
                RawMessage(
                    channel=self._channel,
                    # Stripped invite state has no event id; the batch's token keeps the id
                    # stable when a crash makes us read the same batch again.
                    message_id=f"invite|{room_id}|{inviter}|{since or 'initial'}",
                    sender=inviter,
                    payload={
                        "kind": "invite",
                        "room_id": room_id,
                        "direct": direct,
                        **invite_details(invite_state, inviter),
                    },
                    received_at=time.time(),
                )
            )
            return
        if direct:
            await self._session.store.mark_direct(self._session.user_id, room_id)
        try:
            await self._session.api.join(room_id)
            log.info("matrix: joined %s, invited by %s", room_id, inviter)
        except MatrixError as exc:
            if exc.transient:
                raise
            log.warning("matrix: invite to %s from %s: %s", room_id, inviter, exc)

    async def _on_event(self, room_id: str, event: JsonDict) -> None:
        kind = classify(event, self._session.user_id)
        if kind is EventKind.MESSAGE:
            await self._accept_event(room_id, event)
        elif kind is EventKind.REACTION:
            reaction = reaction_of(event)
            emojis = await self._session.store.card_emojis(reaction[0]) if reaction else None
            if reaction and emojis and reaction[1] in emojis:
                await self._accept_event(room_id, event)
        elif kind is EventKind.ENCRYPTED:
            if self._session.e2ee.available:
                await self._encrypted.on_encrypted(room_id, event)
            else:
                await self._say_encrypted(room_id, event)

    async def _accept_event(self, room_id: str, event: JsonDict) -> None:
        timestamp = event.get("origin_server_ts")
        await self._accept(
            RawMessage(
                channel=self._channel,
                message_id=str(event["event_id"]),
                sender=str(event.get("sender", "")),
                payload={"kind": "event", "room_id": room_id, "event": event},
                received_at=timestamp / 1000 if isinstance(timestamp, int | float) else time.time(),
            )
        )

    async def _accept(self, raw: RawMessage) -> None:
        assert self._submit is not None
        if not await self._submit(raw):
            raise RuntimeError(f"the core did not store {raw.message_id}; will retry")
        self._handed_on = True

    async def _say_encrypted(self, room_id: str, event: JsonDict) -> None:
        sender = str(event.get("sender", ""))
        if not user_allowed(sender, self._session.settings.allowed_users):
            return
        store = self._session.store
        if await store.encrypted_room_told(room_id):
            return
        content = in_conversation(notice_content(ENCRYPTED_NOTICE), None, event.get("event_id"))
        await self._session.send_event(
            room_id, "m.room.message", content, f"gwb-encrypted-{uuid.uuid4().hex}"
        )
        await store.mark_encrypted_room_told(room_id)
        log.info("matrix: told %s that encrypted rooms are not supported", room_id)
