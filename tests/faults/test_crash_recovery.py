"""kill -9 and SIGTERM at awkward moments: every accepted message is answered exactly once."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import RawMessage, Reply
from gateway_bot.state.sql_store import SqlStore
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic


def test_killed_mid_task_the_restart_answers_once(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    fake_api.hold("CRASH")
    first = gateway("chat", "--config", str(config_path))
    first.send("CRASH test message")
    assert fake_api.wait_for_held(60), "the agent never reached the model"
    first.kill()
    assert first.count(r"^agent> ") == 0
    fake_api.release()

    second = gateway("chat", "--config", str(config_path))
    second.expect(r"^agent> Echo: CRASH test message$")
    second.finish()
    assert second.count(r"^agent> ") == 1


def test_reply_stored_before_the_crash_is_sent_not_recomputed(
    gateway, config_path: Path, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    """A daemon that died after the agent finished but before the reply went out."""

    async def leave_a_finished_task() -> None:
        store = SqlStore(tmp_path / "state" / "state.db")
        await store.open()
        raw = RawMessage(
            "console", "m-1", "alice", {"text": "question", "conversation": "default"}, time.time()
        )
        task_id, _ = await store.accept_inbound(raw)
        await store.transition(task_id, TaskState.AUTHENTICATING)
        conversation = await store.create_conversation("console", "default", None)
        from gateway_bot.domain.messages import InboundMessage

        parsed = InboundMessage(
            "console",
            "m-1",
            "console:alice",
            "alice",
            "question",
            "default",
            raw.received_at,
            {"conversation": "default"},
        )
        await store.transition(
            task_id, TaskState.PENDING, conversation_id=conversation.id, parsed=parsed
        )
        await store.transition(task_id, TaskState.EXECUTING)
        await store.record_reply(task_id, Reply(text="the stored answer"))
        await store.close()

    asyncio.run(leave_a_finished_task())
    chat = gateway("chat", "--config", str(config_path))
    chat.expect(r"^agent> the stored answer$")
    chat.finish()
    assert chat.count(r"^agent> ") == 1
    assert fake_api.requests == [], "the agent must not run again"


def test_sigterm_lets_the_running_task_finish(
    gateway, config_path: Path, fake_api: FakeAnthropic
) -> None:
    fake_api.hold("FINISH ME")
    daemon = gateway("run", "--config", str(config_path))
    daemon.send("FINISH ME before exit")
    assert fake_api.wait_for_held(60)
    daemon.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    fake_api.release()
    daemon.expect(r"^agent> Echo: FINISH ME before exit$")
    assert daemon.wait() == 0


def test_sigterm_past_the_timeout_leaves_the_task_for_the_next_start(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(
        tmp_path, target_repo, fake_api, execution={"shutdown_timeout_seconds": 1}
    )
    fake_api.hold("LONG")
    daemon = gateway("run", "--config", str(config))
    daemon.send("LONG running job")
    assert fake_api.wait_for_held(60)
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert daemon.count(r"^agent> ") == 0
    fake_api.release()

    again = gateway("chat", "--config", str(config))
    again.expect(r"^agent> Echo: LONG running job$")
    again.finish()
    assert again.count(r"^agent> ") == 1
