"""The listener's wait for a batch's answers (channels/matrix/sends.py): it ends when the
answers are out, never before one was sent, and never later than its cap."""

from __future__ import annotations

import asyncio

from gateway_bot.channels.matrix.sends import SendsInFlight


async def _send(sends: SendsInFlight, gate: asyncio.Event) -> None:
    async with sends.sending():
        await gate.wait()


async def test_the_wait_ends_when_the_answer_sent_after_the_batch_is_out() -> None:
    sends = SendsInFlight()
    mark = sends.mark()
    waiting = asyncio.create_task(sends.settled_since(mark, start_within_s=30, cap_s=30))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "nothing was sent yet: the poll must wait"
    gate = asyncio.Event()
    answer = asyncio.create_task(_send(sends, gate))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "the answer is still on its way"
    gate.set()
    await answer
    assert await asyncio.wait_for(waiting, 5) is True


async def test_a_send_that_fails_counts_as_out() -> None:
    sends = SendsInFlight()
    mark = sends.mark()
    waiting = asyncio.create_task(sends.settled_since(mark, start_within_s=30, cap_s=30))

    async def refused() -> None:
        async with sends.sending():
            raise RuntimeError("M_FORBIDDEN")

    answer = asyncio.create_task(refused())
    assert await asyncio.wait_for(waiting, 5) is True
    assert isinstance(answer.exception(), RuntimeError)


async def test_the_wait_waits_for_every_send_in_flight() -> None:
    sends = SendsInFlight()
    mark = sends.mark()
    first, second = asyncio.Event(), asyncio.Event()
    one = asyncio.create_task(_send(sends, first))
    two = asyncio.create_task(_send(sends, second))
    waiting = asyncio.create_task(sends.settled_since(mark, start_within_s=30, cap_s=30))
    await asyncio.sleep(0.01)
    first.set()
    await one
    await asyncio.sleep(0.05)
    assert not waiting.done(), "one answer is still on its way"
    second.set()
    await two
    assert await asyncio.wait_for(waiting, 5) is True


async def test_a_batch_that_gets_no_answer_holds_the_poll_only_until_the_cap() -> None:
    sends = SendsInFlight()
    before = SendsInFlight()
    gate = asyncio.Event()
    gate.set()
    await _send(before, gate)  # a send before the batch does not end its wait
    assert (
        await asyncio.wait_for(before.settled_since(before.mark(), start_within_s=30, cap_s=0.2), 5)
        is False
    )
    assert (
        await asyncio.wait_for(sends.settled_since(sends.mark(), start_within_s=30, cap_s=0.2), 5)
        is False
    )


async def test_a_batch_whose_answer_never_starts_holds_the_poll_only_briefly() -> None:
    # Chatter in a group room engages nobody: no send starts, and the next poll must not
    # wait the whole cap for one.
    sends = SendsInFlight()
    waiting = asyncio.create_task(sends.settled_since(sends.mark(), start_within_s=0.1, cap_s=30))
    assert await asyncio.wait_for(waiting, 5) is False
    # An answer that did start is waited for past that window.
    mark = sends.mark()
    gate = asyncio.Event()
    answer = asyncio.create_task(_send(sends, gate))
    waiting = asyncio.create_task(sends.settled_since(mark, start_within_s=0.1, cap_s=30))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "the answer started: it is waited for"
    gate.set()
    await answer
    assert await asyncio.wait_for(waiting, 5) is True


async def test_the_grace_is_owed_after_an_acknowledgement_not_after_a_commands_answer() -> None:
    """After ``/new``'s answer the person's next message comes next, and the grace would
    hold exactly it up (decision 0133); after a task's acknowledgement it is owed."""
    sends = SendsInFlight()
    mark = sends.mark()
    async with sends.sending():  # "Started a new conversation."
        pass
    assert not sends.acknowledged_since(mark)
    async with sends.sending(acknowledgement=True):  # "Working on it…"
        pass
    assert sends.acknowledged_since(mark)
    assert not sends.acknowledged_since(sends.mark())
