"""A conversation's agent runs in its own long-lived Podman container: the real Claude Code
CLI inside it, the fake model API reachable only through the egress proxy."""

from __future__ import annotations

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup


def test_tasks_run_in_the_conversations_container_and_the_next_reuses_it(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config()))
    chat.send("WRITE_FILE name=hello.txt text=written inside")
    chat.expect(r"^agent> Echo: .*WRITE_FILE")
    context_id, first = sandbox.only_container()
    assert first["name"] == f"gwb-{context_id}"
    assert first["running"]
    workspace = sandbox.conversation_dir(context_id) / "workspace"
    assert (workspace / "hello.txt").read_text() == "written inside"
    system = str(fake_api.requests[0].get("system"))
    assert "Primary working directory: /workspace" in system, "the agent ran in the container"

    chat.send("and a second message")
    chat.expect(r"^agent> Echo: .*and a second message")
    chat.close_input()
    assert chat.wait() == 0

    again = sandbox.containers()[context_id]
    assert again["id"] == first["id"], "the second task reuses the container"
    assert again["started"] == first["started"], "and it was never restarted"
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "WRITE_FILE" in history, "the second task resumed the agent session"
    network_log = (sandbox.conversation_dir(context_id) / "network.log").read_text()
    assert f'"url": "{sandbox.relay.url}/v1/messages' in network_log
    assert '"allowed": true' in network_log
