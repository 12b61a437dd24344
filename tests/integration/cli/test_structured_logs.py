"""Structured logs: the standard-library log calls every module makes come out as JSON or
console lines, and while a task runs they carry its task and conversation ids, also from
the asyncio tasks it starts; a real `gateway-bot run` with `logging.format: json` writes
nothing but JSON lines, and the lines about a task name it."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from gateway_bot.runtime.logs import configure_logging
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic

log = logging.getLogger("gateway_bot.tests.logs")


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()


async def a_task_logs() -> None:
    log.info("before any task")
    with structlog.contextvars.bound_contextvars(task_id="t1", conversation_id="c1"):
        log.info("running %s", "t1")

        async def helper() -> None:
            log.warning("from a job the task started")

        await asyncio.create_task(helper())
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")
    log.info("after the task")


@pytest.mark.usefixtures("restored_logging")
async def test_json_lines_carry_the_running_tasks_ids() -> None:
    stream = io.StringIO()
    configure_logging("json", logging.INFO, stream)
    await a_task_logs()
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    events = [line["event"] for line in lines if not line["event"].startswith("Traceback")]
    assert events == [
        "before any task",
        "running t1",
        "from a job the task started",
        "it failed",
        "after the task",
    ]
    before, running, job, failed, after = lines
    assert "task_id" not in before
    assert "task_id" not in after
    for line in (running, job, failed):
        assert (line["task_id"], line["conversation_id"]) == ("t1", "c1")
    assert running["logger"] == "gateway_bot.tests.logs"
    assert (running["level"], job["level"]) == ("info", "warning")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", running["timestamp"])
    assert "ValueError: boom" in failed["exception"]


@pytest.mark.usefixtures("restored_logging")
async def test_console_lines_keep_their_shape_and_add_the_ids() -> None:
    stream = io.StringIO()
    configure_logging("console", logging.INFO, stream)
    await a_task_logs()
    lines = stream.getvalue().splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.fullmatch(rf"{stamp} INFO gateway_bot\.tests\.logs: before any task", lines[0])
    assert re.fullmatch(
        rf"{stamp} INFO gateway_bot\.tests\.logs: running t1 \[conversation_id=c1 task_id=t1\]",
        lines[1],
    )
    assert "Traceback (most recent call last):" in lines
    assert "ValueError: boom" in lines


@pytest.mark.usefixtures("restored_logging")
async def test_structlogs_own_api_goes_to_the_same_place() -> None:
    stream = io.StringIO()
    configure_logging("json", logging.INFO, stream)
    with structlog.contextvars.bound_contextvars(task_id="t2"):
        structlog.get_logger("gateway_bot.tests.native").info("native", attempt=2)
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["event"] == "native"
    assert (line["task_id"], line["attempt"]) == ("t2", 2)
    assert line["logger"] == "gateway_bot.tests.native"
    assert "timestamp" in line


def test_a_real_daemon_logs_json_with_the_tasks_ids(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(tmp_path, target_repo, fake_api, logging={"format": "json"})
    daemon = gateway("run", "--config", str(config))
    daemon.send("hello")
    daemon.expect(r"^agent> Echo: hello$")
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
    lines = [json.loads(line) for line in daemon.stderr.splitlines() if line.strip()]
    running = [line for line in lines if re.fullmatch(r"task \w+ running .*", line["event"])]
    done = [line for line in lines if re.fullmatch(r"task \w+ done: success", line["event"])]
    assert len(running) == len(done) == 1, daemon.stderr
    task_id = running[0]["event"].split()[1]
    for line in (running[0], done[0]):
        assert line["task_id"] == task_id
        assert re.fullmatch(r"[0-9a-f]{8}", line["conversation_id"])
        assert line["logger"] == "gateway_bot.core.conversations.queue"
    assert any(line["event"] == "shutting down" for line in lines)
    assert all("task_id" not in line for line in lines if line["event"] == "shutting down")
