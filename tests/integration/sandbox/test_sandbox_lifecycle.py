"""A conversation's container over its life: a new image, a death mid-task, idle stops, the
cap on running containers, and garbage collection of long-idle conversations."""

from __future__ import annotations

import os
import signal

import pytest

from gateway_bot.sandbox.podman.images import DEFAULT_CONTAINERFILE
from gateway_bot.sandbox.podman.service import INIT_ON_HOST
from tests.integration.agents.test_warm_sessions import with_warm_sessions
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup, commit_file, podman, wait_until

pytestmark = pytest.mark.slow


def test_a_changed_containerfile_recreates_the_container_with_its_workspace_and_session(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    # Cold runs: every exec ends with its task (the warm variant, whose one exec stays, is
    # tests/integration/sandbox/test_warm_sessions_podman.py's changed-Containerfile test).
    chat = gateway("chat", "--config", str(with_warm_sessions(sandbox.config(), 0)))
    chat.send("WRITE_FILE name=notes.txt text=kept across images")
    chat.expect(r"^agent> Echo: .*WRITE_FILE")
    context_id, before = sandbox.only_container()
    # Every exec the daemon ran has ended: podman's REST exec leaves its conmon alive, which
    # holds the container's shm and makes the recreate below fail with "resource busy".
    # The daemon lets each session go once it has the exit code (podman itself would keep it
    # for 300 s): gone in moments, not at once.
    wait_until(
        lambda: (
            podman("inspect", "--format", "{{.ExecIDs}}", before["name"]).stdout.strip() == "[]"
        ),
        "the finished tasks' exec sessions to be removed",
        timeout=120,
    )

    # The repo's image also names a program of its own as ENTRYPOINT, and a stop signal
    # init ignores: neither is taken (the entrypoint ran as PID 1, spared by every sweep).
    marker = (
        "RUN echo rebuilt > /etc/gateway-test-marker\n"
        'ENTRYPOINT ["/bin/sleep", "infinity"]\nSTOPSIGNAL SIGUSR1\n'
    )
    commit_file(sandbox.repo, ".gateway/Containerfile", DEFAULT_CONTAINERFILE.read_text() + marker)
    chat.send("after the image changed")
    # Builds a layer: seconds, well under the test's 300 s.
    chat.expect(r"^agent> Echo: .*after the image changed", timeout=240)
    after = sandbox.containers()[context_id]
    assert after["id"] != before["id"], "a new container"
    assert after["image"] != before["image"], "on a new image"
    assert sandbox.exec(after["name"], "cat /etc/gateway-test-marker").stdout == "rebuilt\n"
    assert sandbox.exec(after["name"], "cat /workspace/notes.txt").stdout == "kept across images"
    init_pid = podman("inspect", "--format", "{{.State.Pid}}", after["name"]).stdout.strip()
    init_file, ours = os.stat(f"/proc/{init_pid}/exe"), os.stat(INIT_ON_HOST)
    assert (init_file.st_dev, init_file.st_ino) == (ours.st_dev, ours.st_ino), "PID 1 is init"
    stop_signal = podman("inspect", "--format", "{{.Config.StopSignal}}", after["name"])
    assert stop_signal.stdout.strip() in ("15", "SIGTERM"), stop_signal.stdout
    chat.close_input()
    assert chat.wait() == 0
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "WRITE_FILE" in history, "the agent session survived the new container"


def test_a_container_that_dies_mid_task_fails_that_task_and_is_recreated(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config()))
    fake_api.hold("DOOMED")
    chat.send("DOOMED task")
    assert fake_api.wait_for_held(90)
    context_id, before = sandbox.only_container()
    podman("kill", before["name"])
    chat.expect(r"the container gwb-\w+ stopped while the task ran")
    fake_api.release()

    chat.send("the next message")
    chat.expect(r"^agent> Echo: .*the next message")
    after = sandbox.containers()[context_id]
    assert after["id"] != before["id"]
    assert after["running"]
    chat.close_input()
    assert chat.wait() == 0


def test_an_idle_container_stops_and_the_next_message_starts_it_again(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config(idle_stop_minutes=0.05)))
    chat.send("before the nap")
    chat.expect(r"^agent> Echo: .*before the nap")
    context_id, before = sandbox.only_container()
    wait_until(lambda: not sandbox.containers()[context_id]["running"], "the idle stop")

    chat.send("wake up")
    chat.expect(r"^agent> Echo: .*wake up")
    chat.close_input()
    assert chat.wait() == 0
    after = sandbox.containers()[context_id]
    assert after["id"] == before["id"], "the same container, started again"
    history = " ".join(fake_api.user_texts(fake_api.requests[-1]))
    assert "before the nap" in history


def test_past_the_cap_the_longest_idle_container_is_stopped_first(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(sandbox.config(max_live_containers=1)))
    chat.send("first conversation")
    chat.expect(r"^agent> Echo: .*first conversation")
    first_id, _ = sandbox.only_container()
    chat.send("/new")
    chat.expect(r"Started a new conversation")
    chat.send("second conversation")
    chat.expect(r"^agent> Echo: .*second conversation")
    containers = sandbox.containers()
    assert not containers.pop(first_id)["running"], "the idle one was stopped"
    assert [c["running"] for c in containers.values()] == [True]
    chat.close_input()
    assert chat.wait() == 0


def test_a_long_idle_conversation_loses_its_container_and_directories(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    daemon = gateway("run", "--config", str(sandbox.config(gc_after_days=0.0001)))  # ~9 s
    daemon.send("soon forgotten")
    daemon.expect(r"^agent> Echo: .*soon forgotten")
    context_id, _ = sandbox.only_container()
    directory = sandbox.conversation_dir(context_id)
    assert (directory / "workspace").is_dir()
    wait_until(lambda: not sandbox.containers(), "garbage collection of the container")
    wait_until(lambda: not directory.exists(), "garbage collection of the directories")
    networks = podman("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert f"gwb-net-{context_id}" not in networks

    daemon.send("I am back")  # the conversation lives on, with a fresh session
    daemon.expect(r"^agent> Echo: .*I am back")
    assert (directory / "workspace").is_dir()
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0
