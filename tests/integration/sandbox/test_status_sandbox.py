"""`gateway-bot status` lists the podman sandbox's containers of this deployment while a chat
is open, and after it quit: as podman has them now (stopped), not as the daemon last saw
them (running); the console ended by Ctrl-D is stopped, not failed, as of the time the
daemon last reported it."""

from __future__ import annotations

from typing import Any

from tests.integration.cli.test_status_command import status, status_json, wait_for_status
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup


def test_status_lists_the_conversations_container(
    gateway: Any, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    config = sandbox.config()
    chat = gateway("chat", "--config", str(config))
    chat.send("hello from the box")
    chat.expect(r"^agent> Echo: .*hello from the box")
    context_id, info = sandbox.only_container()

    shown = wait_for_status(config, lambda s: bool(s["containers"]), "the container")
    assert shown["containers"] == [
        {"name": info["name"], "conversation_id": context_id, "state": "running"}
    ]
    assert shown["daemon"]["sandbox"] == "podman"
    assert shown["containers_error"] is None
    chat.close_input()  # Ctrl-D
    assert chat.wait() == 0

    after = status_json(config)
    assert after["daemon"]["running"] is False
    assert after["containers"] == [
        {"name": info["name"], "conversation_id": context_id, "state": "exited"}
    ], "podman's word now, not the daemon's last"
    assert after["containers_error"] is None
    assert after["channels"] == [
        {"name": "console", "health": "stopped", "message": "end of input"}
    ]
    table = status(config).stdout
    assert "Channels (as the daemon last reported, " in table
    assert "failed" not in table
