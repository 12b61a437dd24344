"""kill -9 of the daemon, idle and mid-task: containers survive untouched, the interrupted
message is answered exactly once, and a container the state does not know is left alone."""

from __future__ import annotations

import signal

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup, current_image, podman, podman_run_flags


def _crash_requests(api: FakeAnthropic) -> int:
    return sum(1 for r in api.requests if "CRASH" in " ".join(api.user_texts(r)))


def test_kill_9_idle_and_mid_task_keeps_the_container_and_answers_once(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    config = str(sandbox.config())
    first = gateway("chat", "--config", config)
    first.send("hello before the crashes")
    first.expect(r"^agent> Echo: .*hello before the crashes")
    context_id, before = sandbox.only_container()
    first.kill()  # idle

    second = gateway("chat", "--config", config)
    second.expect(rf"^gateway-bot console · conversation default \({context_id}\)")
    assert sandbox.containers()[context_id] == before, "an idle restart changes nothing"
    fake_api.hold("CRASH")
    second.send("CRASH in the middle of a task")
    assert fake_api.wait_for_held(90), "the agent never reached the model"
    second.kill()  # mid-task: the agent inside the container is still waiting on the model
    assert second.count(r"^agent> ") == 0

    third = gateway("chat", "--config", config)
    leftover = sandbox.exec(before["name"], "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
    assert "claude -p" in leftover, "the killed daemon's agent lives on in the container"
    third.expect(rf"^gateway-bot console · conversation default \({context_id}\)")
    fake_api.release()
    third.expect(r"^agent> Echo: CRASH in the middle of a task$")
    third.close_input()
    assert third.wait() == 0
    assert third.count(r"^agent> ") == 1, "answered exactly once"

    after = sandbox.containers()[context_id]
    assert after["id"] == before["id"], "restarts never replace a running container"
    assert after["started"] == before["started"], "nor stop it"
    # The killed daemon's agent made one request and was cleared at the restart; had it
    # lived on it would have sent its tool result too: 1 + the re-run's 2 requests.
    assert _crash_requests(fake_api) == 3


def test_a_labelled_container_the_state_does_not_know_is_reported_and_left_alone(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    stranger = "gwb-feedf00d"
    podman(
        "run", "-d", "--name", stranger, *podman_run_flags(),
        "--label", f"gateway-bot.deployment={sandbox.deployment}",
        "--label", "gateway-bot.role=agent", "--label", "gateway-bot.context=feedf00d",
        "--entrypoint", "sleep", current_image("localhost/gateway-bot/agent"), "infinity",
    )  # fmt: skip
    daemon = gateway("run", "--config", str(sandbox.config()))
    daemon.send("hello next to a stranger")
    daemon.expect(r"^agent> Echo: .*hello next to a stranger")
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert f"container {stranger} has this deployment's labels" in daemon.stderr
    assert "left alone" in daemon.stderr
    containers = sandbox.containers()
    assert containers["feedf00d"]["running"], "the stranger was not touched"
    assert len(containers) == 2
