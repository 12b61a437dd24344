"""One conversation must not fill the host's disk: its directories have a size limit, its
events.jsonl a cap, and a huge reply goes out as a file. The attacks are the agent's own:
a Bash command that writes without end, a reply of many megabytes' worth of text."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from tests.conftest import write_config
from tests.integration.sandbox.test_host_stop import processes_with
from tests.support.fake_anthropic import FakeAnthropic

QUOTA_STOP = (
    r"^error> The task was stopped: this conversation's files take [\d.]+ MB, over its "
    r"limit of 2\.0 MB \(largest: workspace [\d.]+ MB"
)
QUOTA_REFUSAL = (
    r"^error> This message was not run: this conversation's files take [\d.]+ MB, over its "
    r"limit of 2\.0 MB \(largest: workspace "
)


def test_a_task_filling_the_disk_is_stopped_and_the_conversation_refused(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(
        tmp_path,
        target_repo,
        fake_api,
        execution={"conversation_disk_limit_mb": 2, "disk_check_interval_seconds": 0.5},
    )
    marker = f"fill-{secrets.token_hex(8)}.bin"  # in the command line of the writing shell
    chat = gateway("chat", "--config", str(config))
    chat.send(
        f"RUN_BASH for i in $(seq 1 300); do head -c 1048576 /dev/zero >> {marker}; sleep 0.1; done"
    )
    chat.expect(QUOTA_STOP)
    chat.expect(r"^To go on, start a new conversation with /new")
    assert processes_with(marker) == [], "the writer outlived its stopped task"
    asked = len(fake_api.requests)

    chat.send("one more thing")
    chat.expect(QUOTA_REFUSAL)
    assert len(fake_api.requests) == asked, "a conversation over its limit runs nothing"

    chat.send("/new")
    chat.expect(r"^agent> Started a new conversation")
    chat.send("fresh start")
    chat.expect(r"^agent> Echo: fresh start$")
    chat.finish()


def test_a_huge_reply_arrives_as_a_file_and_the_event_log_stops_growing(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(tmp_path, target_repo, fake_api, execution={"events_log_limit_mb": 0.05})
    words = " ".join(f"word{n:05d}" for n in range(6000))  # 60,000 characters
    chat = gateway("chat", "--config", str(config))
    chat.send(words)
    chat.expect(r"^agent> Echo: word00000 word00001 ")
    chat.expect(
        r"^\[The reply has 60,005 characters, more than the 40,000 sent as a message: "
        r"all of it is attached as reply\.md\.\]$"
    )
    sent = chat.expect(r"^  \[file\] .*/sent/[0-9a-f]{12}/reply\.md$")
    assert Path(sent.split("[file] ")[1]).read_text() == f"Echo: {words}"
    longest = max(len(line) for line in chat.lines)
    assert longest < 4000, "the console printed the huge reply itself"

    events = next((tmp_path / "state" / "conversations").glob("*/events.jsonl"))
    size = os.path.getsize(events)
    assert size <= 0.05 * 1024 * 1024 + 300
    last = json.loads(events.read_text().splitlines()[-1])
    assert last["type"] == "gateway_bot_cut"

    chat.send("and a short one")
    chat.expect(r"^agent> Echo: and a short one$")
    chat.finish()
    assert os.path.getsize(events) == size, "a cut event log grew again"


def test_links_neither_inflate_nor_hide_a_conversations_size(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    """A link to a big host directory is not walked (it would count the host's files, or
    take forever), and a file with three names counts once."""
    config = write_config(
        tmp_path, target_repo, fake_api, execution={"conversation_disk_limit_mb": 2}
    )
    chat = gateway("chat", "--config", str(config))
    chat.send(
        "RUN_BASH ln -s /usr host-usr; head -c 1048576 /dev/urandom > one.bin; "
        "ln one.bin two.bin; ln one.bin three.bin"
    )
    chat.expect(r"^agent> Echo: RUN_BASH ln -s /usr host-usr")
    chat.send("still within the limit?")
    chat.expect(r"^agent> Echo: still within the limit\?$")
    chat.finish()
    assert chat.count(r"over its limit") == 0
