"""Approval cards on their way to the owners: posted, edited as messages are held, retried
when the post failed, closed when decided or expired.

Where the approval destination's channel has ``CardButtons`` the card is one message with
buttons, edited in place (at most once per ``CARD_REFRESH_S`` however fast a stranger
writes). Where it has not, the card is a text notice (``send_rejection``) quoting the same
messages verbatim and telling owners to reply ``!approve CODE`` / ``!deny CODE`` (the
shared commands, which count only from an owner or admin, like a press). A text notice
cannot be edited, so it goes out again only when it would quote more held messages (at
most ``SHOWN_MESSAGES`` times per card), and of the decided states only expiry is told
(a decision by command is answered by that command).

Kept apart from the gate (``core/admission/gate.py``), which decides who is held and what a
decision does; both hold this module's ``lock``, so an edit of a pending card never lands
after the edit that decided it, and "shown" is exactly what the card said at the decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from gateway_bot.config.access import AccessSettings
from gateway_bot.core.admission.cards import (
    SHOWN_MESSAGES,
    HeldSummary,
    Outcome,
    decided_card,
    pending_card,
)
from gateway_bot.core.channel import CardButtons, ChannelAdapter
from gateway_bot.core.retries import DEFAULT_POLICY, RetryPolicy, call_channel
from gateway_bot.domain.messages import Card, JsonDict
from gateway_bot.domain.records import ApprovalRecord, ApprovalState
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

CARD_REFRESH_S = 2.0
"""A pending card is edited at most this often however fast its sender writes."""

TEXT_CARD_REF = ""
"""The card reference of a text card: sent (not NULL, so never posted again at start-up),
but nothing to edit."""


class CardPosting:
    def __init__(
        self,
        store: Store,
        access: AccessSettings,
        adapters: Mapping[str, ChannelAdapter],
        timezone: str,
        *,
        card_refresh_s: float = CARD_REFRESH_S,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
    ) -> None:
        self._store = store
        self._access = access
        self._adapters = adapters
        self._timezone = timezone
        self._card_refresh_s = card_refresh_s
        self._retry_policy = retry_policy
        self.lock = asyncio.Lock()
        """Held around every card send or edit and every decision (by the gate)."""
        self._refresh_due: set[str] = set()
        self._jobs: set[asyncio.Task[None]] = set()
        self._posting: set[str] = set()
        """Cards whose failed first post is being retried now."""

    async def show(self, approval: ApprovalRecord) -> None:
        """Send or edit the pending card; a first post that fails is retried by a job of its
        own, outside the locks (and by the service's sweep and at start-up, which find it
        without a message reference). Caller holds ``lock``."""
        try:
            await self._post_or_edit(approval)
        except Exception:
            log.warning("could not send approval card %s", approval.code, exc_info=True)
            if approval.card_ref is None:
                self._post_later(approval.code)

    def refresh_later(self, code: str) -> None:
        """Edit the pending card once the burst settles: one edit per refresh period, not
        one per message, however many a sender writes."""
        if code in self._refresh_due:
            return
        self._refresh_due.add(code)
        self._spawn(self._refresh(code))

    async def resend_unsent(self) -> None:
        """Post the pending cards that never reached the owners (at start-up, and from the
        service's sweep): a failed post must not leave a message held until it expires."""
        for approval in await self._store.approvals.unsent_cards():
            self._post_later(approval.code)

    async def close_decided(self, approval: ApprovalRecord, outcome: Outcome | None) -> None:
        """Turn the card into its decided state (buttons gone). Caller holds ``lock``."""
        if not (approval.card_channel and approval.card_ref is not None):
            return
        adapter = self._adapters.get(approval.card_channel)
        if adapter is None:
            return
        card = decided_card(approval, self._timezone, outcome)
        try:
            if isinstance(adapter, CardButtons):
                await adapter.update_card(approval.card_context or {}, approval.card_ref, card)
            elif approval.state is ApprovalState.EXPIRED:
                await adapter.send_rejection(approval.card_context or {}, _as_text(card))
        except Exception:
            log.warning("could not update approval card %s", approval.code, exc_info=True)

    async def close(self) -> None:
        """Cancel pending card edits and posts (shutdown); the next start redoes them."""
        for job in list(self._jobs):
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        job = asyncio.create_task(coroutine)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _refresh(self, code: str) -> None:
        await asyncio.sleep(self._card_refresh_s)
        # Due no more before editing: a message held during the edit schedules the next.
        self._refresh_due.discard(code)
        try:
            async with self.lock:
                approval = await self._store.approvals.get(code)
                if approval is not None and approval.state is ApprovalState.PENDING:
                    await self.show(approval)
        except Exception:
            log.warning("could not refresh approval card %s", code, exc_info=True)

    def _post_later(self, code: str) -> None:
        if code in self._posting:
            return
        self._posting.add(code)
        self._spawn(self._post_until_sent(code))

    async def _post_until_sent(self, code: str) -> None:
        async def attempt() -> None:
            async with self.lock:
                approval = await self._store.approvals.get(code)
                pending = approval is not None and approval.state is ApprovalState.PENDING
                if approval is not None and pending and approval.card_ref is None:
                    await self._post_or_edit(approval)

        try:
            await asyncio.sleep(self._retry_policy.first_wait_s)
            await call_channel(f"posting approval card {code}", attempt, self._retry_policy)
        except Exception as exc:
            log.warning("approval card %s is still not posted (%s); will try again", code, exc)
        finally:
            self._posting.discard(code)

    async def _post_or_edit(self, approval: ApprovalRecord) -> None:
        """Send or edit the pending card to quote the first held messages, then record which
        ones it quotes: those are what Allow runs. Raises what the channel raised."""
        destination = self._access.approval_destination
        assert destination is not None
        adapter = self._adapters.get(destination.channel)
        if adapter is None:
            log.error("approval destination channel %r is not running", destination.channel)
            return
        approvals = self._store.approvals
        held = await approvals.held_tasks(approval.code)
        quoted = held[:SHOWN_MESSAGES]
        bodies = []
        for task_id in quoted:
            parsed = (await self._store.get_task(task_id)).parsed
            bodies.append(parsed.body if parsed is not None else "")
        summary = HeldSummary(tuple(bodies), len(held))
        if not isinstance(adapter, CardButtons):
            if approval.card_ref is not None:
                shown = await approvals.shown_tasks(approval.code)
                if len(quoted) <= len(shown):
                    return  # a text card is not sent again just to count the unquoted
            text = _as_text(pending_card(approval, summary, buttons=False))
            await adapter.send_rejection(destination.context, text)
            await approvals.mark_shown(approval.code, quoted)
            if approval.card_ref is None:
                await approvals.set_card(
                    approval.code, destination.channel, destination.context, TEXT_CARD_REF
                )
            return
        card = pending_card(approval, summary)
        if approval.card_ref is None:
            ref = await adapter.send_card(destination.context, card)
            # Shown first: a crash between the two writes then costs a second card (posted
            # at the next start), not a held message that Allow would drop as unseen.
            await approvals.mark_shown(approval.code, quoted)
            await approvals.set_card(approval.code, destination.channel, destination.context, ref)
            return
        await adapter.update_card(approval.card_context or {}, approval.card_ref, card)
        await approvals.mark_shown(approval.code, quoted)


async def post_card(
    adapter: ChannelAdapter, context: JsonDict, card: Card, text: str, what: str
) -> str:
    """Post ``card`` with buttons where the channel has them, else ``text`` (its words
    with the ``!`` commands) as a notice; the card's reference, ``TEXT_CARD_REF`` for a
    notice (nothing to edit). Shared by every kind of card the core asks with."""
    if isinstance(adapter, CardButtons):
        with_buttons = adapter
        ref: str = await call_channel(what, lambda: with_buttons.send_card(context, card))
        return ref
    await call_channel(what, lambda: adapter.send_rejection(context, text))
    return TEXT_CARD_REF


def _as_text(card: Card) -> str:
    """A card as a notice (markdown) for a channel without buttons."""
    return f"**{card.title}**\n\n{card.body}"
