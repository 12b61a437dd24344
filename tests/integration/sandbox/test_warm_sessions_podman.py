"""Warm agent sessions in a real container: one ``claude`` process inside the conversation's
container serves turn after turn; killed, the next message still gets its answer with the
history; a new image ends it; and it does not keep an idle container running."""

from __future__ import annotations

import pytest

from gateway_bot.sandbox.podman.images import DEFAULT_CONTAINERFILE
from tests.integration.agents.test_warm_sessions import with_warm_sessions
from tests.security.test_security_sandbox_files import _processes_with
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup, commit_file, wait_until

pytestmark = pytest.mark.slow

LIST_WARM_AGENTS = (
    "for p in /proc/[0-9]*; do "
    'case "$(readlink $p/exe)" in */claude) ;; *) continue ;; esac; '
    "if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q -- '--input-format stream-json'; "
    'then echo "${p#/proc/}"; fi; done'
)
"""Processes whose program is ``claude`` (not this script, which names the flag too)."""


def warm_pids(sandbox: SandboxSetup, container: str) -> list[str]:
    """The warm agent processes' pids inside the container."""
    listed = sandbox.exec(container, LIST_WARM_AGENTS)
    return [pid for pid in listed.stdout.split() if pid]


def test_one_process_in_the_container_serves_both_turns_and_a_killed_one_is_replaced(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(with_warm_sessions(sandbox.config())))
    chat.send("remember the word kumquat")
    chat.expect(r"^agent> Echo: remember the word kumquat$")
    _, container = sandbox.only_container()
    first = warm_pids(sandbox, container["name"])
    assert len(first) == 1, first
    chat.send("the second question")
    chat.expect(r"^agent> Echo: the second question$")
    assert warm_pids(sandbox, container["name"]) == first, "the same process, same pid"

    sandbox.exec(container["name"], f"kill -9 {first[0]}")
    wait_until(lambda: first[0] not in warm_pids(sandbox, container["name"]), "the kill")
    chat.send("what was the word?")
    chat.expect(r"^agent> Echo: what was the word\?$")
    assert "remember the word kumquat" in " ".join(fake_api.user_texts(fake_api.requests[-1]))
    chat.close_input()
    assert chat.wait() == 0
    assert chat.count(r"^error> ") == 0


def test_a_warm_process_ends_with_its_idle_container(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway(
        "chat", "--config", str(with_warm_sessions(sandbox.config(idle_stop_minutes=0.05)))
    )
    chat.send("before the nap")
    chat.expect(r"^agent> Echo: before the nap$")
    context_id, _ = sandbox.only_container()
    wait_until(lambda: not sandbox.containers()[context_id]["running"], "the idle stop")
    chat.send("wake up")
    chat.expect(r"^agent> Echo: wake up$")
    assert "before the nap" in " ".join(fake_api.user_texts(fake_api.requests[-1]))
    chat.close_input()
    assert chat.wait() == 0


def test_a_changed_containerfile_ends_the_warm_process_and_the_session_moves_on(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    chat = gateway("chat", "--config", str(with_warm_sessions(sandbox.config())))
    chat.send("remember the word kumquat")
    chat.expect(r"^agent> Echo: remember the word kumquat$")
    context_id, before = sandbox.only_container()
    assert len(warm_pids(sandbox, before["name"])) == 1

    marker = "RUN echo rebuilt > /etc/gateway-test-marker\n"
    commit_file(sandbox.repo, ".gateway/Containerfile", DEFAULT_CONTAINERFILE.read_text() + marker)
    chat.send("after the image changed")
    chat.expect(r"^agent> Echo: after the image changed$", timeout=240)
    after = sandbox.containers()[context_id]
    assert after["id"] != before["id"], "a new container, not the warm process's old one"
    assert sandbox.exec(after["name"], "cat /etc/gateway-test-marker").stdout == "rebuilt\n"
    assert len(warm_pids(sandbox, after["name"])) == 1, "warm again, in the new container"
    assert "remember the word kumquat" in " ".join(fake_api.user_texts(fake_api.requests[-1]))
    chat.close_input()
    assert chat.wait() == 0


def test_background_processes_end_after_each_turn_while_the_warm_process_stays(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    # As tests/security/test_security_sandbox_files.py's attack, with the agent's process kept: it
    # swaps the container's kill for a no-op, then leaves processes behind, in a session of
    # their own and not, each carrying the environment (the exec's run mark) of the agent.
    sabotage = (
        "printf '#!/bin/bash\\nexit 0\\n' > /tmp/noop && chmod +x /tmp/noop"
        " && cp /tmp/noop /usr/bin/kill"
        " && (setsid sleep 777778 >/dev/null 2>&1 < /dev/null &)"
        " && (sleep 777779 >/dev/null 2>&1 < /dev/null &)"
    )
    chat = gateway("chat", "--config", str(with_warm_sessions(sandbox.config())))
    chat.send(f"RUN_BASH {sabotage}")
    chat.expect(r"^agent> Echo:")
    assert _processes_with("sleep 77777") == [], "a background process outlived its turn"
    _, container = sandbox.only_container()
    first = warm_pids(sandbox, container["name"])
    assert len(first) == 1, "the warm process itself was kept"
    chat.send("and the next task still runs")
    chat.expect(r"^agent> Echo: .*next task still runs")
    assert warm_pids(sandbox, container["name"]) == first, "served by the same process"
    chat.close_input()
    assert chat.wait() == 0


def test_a_daemon_killed_mid_turn_with_a_warm_session_answers_once_after_restart(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    config = with_warm_sessions(sandbox.config())
    first = gateway("chat", "--config", str(config))
    first.send("remember the word kumquat")
    first.expect(r"^agent> Echo: remember the word kumquat$")
    _, container = sandbox.only_container()
    (before,) = warm_pids(sandbox, container["name"])
    fake_api.hold("CRASH")
    first.send("CRASH in the second turn")
    assert fake_api.wait_for_held(60), "the warm agent never asked the model"
    first.kill()
    fake_api.release()

    second = gateway("chat", "--config", str(config))
    second.expect(r"^agent> Echo: CRASH in the second turn$")
    assert before not in warm_pids(sandbox, container["name"]), "the orphan was ended"
    second.send("what was the word?")
    second.expect(r"^agent> Echo: what was the word\?$")
    assert "remember the word kumquat" in " ".join(fake_api.user_texts(fake_api.requests[-1]))
    second.close_input()
    assert second.wait() == 0
    assert first.count(r"^agent> Echo: CRASH") + second.count(r"^agent> Echo: CRASH") == 1
