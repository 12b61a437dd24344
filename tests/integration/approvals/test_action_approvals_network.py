"""The network-write boundary through the real daemon (decision 0086, layer 2 end to end): the
agent, in its podman container, pushes with git copied under another name (no tool-call
rule could match that command, and none is configured); the egress proxy holds the push, the
daemon cards the conversation with the host, path and pushed ref, and the person's answer
decides: Deny leaves the server unchanged and the agent reads why; Allow lands the commit.
A git smart-HTTP server on the host side of the sandbox network stands in for a forge."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.git_http_server import GitHttpServer
from tests.support.sandbox_fixtures import Relay, SandboxSetup, commit_file

pytestmark = pytest.mark.slow

IDENTITY = "-c user.name=Agent -c user.email=agent@example.test"


def _push(url: str, subject: str) -> str:
    """A shell line that commits and pushes with git renamed: one Bash call."""
    return (
        'cp "$(command -v git)" /tmp/g && cd /tmp && rm -rf w && /tmp/g init -q -b main w '
        f"&& cd w && /tmp/g {IDENTITY} commit -q --allow-empty -m {subject} "
        f"&& /tmp/g push {url} main 2>&1; echo exit=$?"
    )


async def _code(chat: Any) -> tuple[str, str]:
    """The card's text up to its decision line, and its code."""
    line = await asyncio.to_thread(chat.expect, r"!allow [0-9a-f]{12}")
    return "\n".join(chat.lines), re.findall(r"!allow ([0-9a-f]{12})", line)[0]


async def test_a_push_under_another_name_is_carded_and_the_answer_decides(
    gateway: Any, sandbox: SandboxSetup, fake_api: FakeAnthropic, tmp_path: Path
) -> None:
    server = GitHttpServer(tmp_path / "forge")
    server.root.mkdir()
    bare = server.bare_repo("repo.git")
    await server.start()
    try:
        relay = Relay(sandbox.egress.gateway, server.port)
        allow = f"allow:\n  - host: '{relay.host}'\n    ports: [{relay.port}]\n"
        commit_file(sandbox.repo, ".gateway/network-allowlist.yaml", allow)
        chat = gateway("chat", "--config", str(sandbox.config()))
        url = f"{relay.url}/repo.git"

        chat.send(f"SHOW_RESULT RUN_BASH {_push(url, 'denied-push')}")
        card, code = await _code(chat)
        assert "git-receive-pack" in card, card
        assert relay.host in card, card
        assert "refs/heads/main" in card, "the card shows what would be pushed"
        assert "denied-push" in card, "and the commit's subject"
        chat.send(f"!deny {code} not before the review")
        reply = await asyncio.to_thread(chat.expect, r"^agent> Echo: SHOW_RESULT RUN_BASH")
        assert "[remote rejected] main -> main" in reply, reply
        assert "not before the review" in reply, "the agent reads the person's reason"
        assert server.ref(bare, "refs/heads/main") is None, "the server is unchanged"
        assert ("POST", "/repo.git/git-receive-pack") not in server.requests

        chat.send(f"SHOW_RESULT RUN_BASH {_push(url, 'allowed-push')}")
        _, second = await _code(chat)
        assert second != code, "a new request, a new code"
        chat.send(f"!allow {code}")  # the old card's code decides nothing now
        chat.send(f"!allow {second}")
        reply = await asyncio.to_thread(chat.expect, r"^agent> Echo: SHOW_RESULT RUN_BASH")
        assert "exit=0" in reply, reply
        head = server.ref(bare, "refs/heads/main")
        assert head is not None
        assert server.subject(bare, head) == "allowed-push"
        await asyncio.to_thread(chat.finish)
    finally:
        await server.close()
