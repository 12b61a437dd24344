"""`gateway-bot chat` leaves nothing running when the user leaves (Ctrl-D): the
conversation's container and the egress proxy are stopped, not removed, and the podman
service the chat started is ended; the next chat starts them again and resumes there."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import live_processes
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup, podman


def _states(sandbox: SandboxSetup) -> dict[str, str]:
    """What `podman ps -a` shows for this deployment: container name -> state."""
    listed = podman(
        "ps", "-a", "--format", "json",
        "--filter", f"label=gateway-bot.deployment={sandbox.deployment}",
    ).stdout  # fmt: skip
    return {entry["Names"][0]: entry["State"] for entry in json.loads(listed or "[]")}


def test_chat_stops_its_container_and_proxy_on_exit_and_the_next_chat_resumes_there(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    socket = tmp_path / "podman.sock"  # a service of this test's own, started by the chat
    config = str(sandbox.config(podman={"socket": str(socket)}))
    proxy = f"gwb-proxy-{sandbox.deployment}"

    first = gateway("chat", "--config", config)
    first.send("remember the word walrus")
    first.expect(r"^agent> Echo: .*remember the word walrus")
    context_id, before = sandbox.only_container()
    assert _states(sandbox) == {before["name"]: "running", proxy: "running"}
    first.finish()  # Ctrl-D

    assert _states(sandbox) == {before["name"]: "exited", proxy: "exited"}, "stopped, kept"
    running = podman("ps", "--format", "{{.Names}}").stdout.split()
    assert before["name"] not in running
    assert proxy not in running
    assert not live_processes(lambda pid, argv: f"unix://{socket}" in argv), "service ended"

    second = gateway("chat", "--config", config)
    second.send("which word was it")
    second.expect(r"^agent> Echo: .*which word was it")
    after = sandbox.containers()[context_id]
    assert after["id"] == before["id"], "the same container, started again"
    assert after["running"]
    assert after["started"] != before["started"], "restarted"
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "remember the word walrus" in history, "the agent session resumed"
    second.finish()
    assert _states(sandbox) == {before["name"]: "exited", proxy: "exited"}
