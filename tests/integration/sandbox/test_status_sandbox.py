"""`gateway-bot status` lists the podman sandbox's containers of this deployment, as the
daemon sees them, while a chat is open."""

from __future__ import annotations

from typing import Any

from tests.integration.cli.test_status_command import wait_for_status
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
    chat.close_input()
    assert chat.wait() == 0
