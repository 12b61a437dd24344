"""The network-write boundary, as the attack: a push the tool-call layer never sees.

The agent is root in its container and can run git under any name, with any settings. Here a
script copies git to ``/tmp/g`` and pushes with it to a git smart-HTTP server the test runs on
the host side of the sandbox network (``git http-backend``, reached through the real egress
proxy and a relay on the egress network's gateway). The proxy holds the push and the
sandbox's seam is asked with the host, path, method and refs: a refusal leaves the server's
repository unchanged and git prints why; an approval lands the commit; a fetch or clone is
never held; no answer in time, or a daemon that goes away while the push waits, refuses it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.egress.git_push import ZERO_SHA, RefUpdate
from gateway_bot.sandbox.egress.held import HeldRequest
from gateway_bot.sandbox.egress.rules import EgressRule
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.support.git_http_server import GitHttpServer
from tests.support.sandbox_fixtures import Relay, SandboxSetup

DEADLINE_S = 120
"""A guard so a hung push fails the test instead of hanging it, not a speed check."""
TIMEOUT_S = 4
"""The sandbox's approval timeout here (the default is 600)."""
AGENT = "-c user.name=Agent -c user.email=agent@example.test"
MAKE_COMMIT = (
    'cp "$(command -v git)" /tmp/g && cd /tmp && rm -rf w && /tmp/g init -q -b main w && cd w '
    f"&& /tmp/g {AGENT} commit -q --allow-empty -m 'the pushed commit' && /tmp/g rev-parse HEAD"
)


def make_context(root: Path, allowlist: tuple[EgressRule, ...]) -> ExecutionContext:
    dirs = {name: root / name for name in ("workspace", "home", "inbox", "outbox", "storage")}
    for path in dirs.values():
        path.mkdir(parents=True)
    return ExecutionContext(
        id="pusher", allowlist=allowlist, network_log=root / "network.log", **dirs
    )


class Owner:
    """The seam's other end: gives the next of its answers, and remembers what it was asked
    and what the server's branch was at that moment (what a denial must leave alone)."""

    def __init__(self, server: GitHttpServer, bare: Path) -> None:
        self.answers: list[str] = []
        self.asked: list[HeldRequest] = []
        self.branch_when_asked: list[str | None] = []
        self.cancelled = 0
        self.waiting = asyncio.Event()
        self._server, self._bare = server, bare

    async def __call__(self, held: HeldRequest) -> bool | tuple[bool, str]:
        self.asked.append(held)
        branch = await asyncio.to_thread(self._server.ref, self._bare, "refs/heads/main")
        self.branch_when_asked.append(branch)
        answer = self.answers.pop(0)
        if answer == "allow":
            return True
        if answer == "deny":
            return False, "not now"
        self.waiting.set()
        try:
            await asyncio.sleep(3600)  # nobody answers
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return True


async def run(podman: PodmanSandbox, context: ExecutionContext, script: str) -> tuple[str, int]:
    process = await podman.start(context, ["bash", "-c", script], {})
    try:
        async with asyncio.timeout(DEADLINE_S):
            out = (await process.stdout.read()).decode()
            return out, await process.wait()
    finally:
        process.kill()


def sections(output: str) -> dict[str, str]:
    """``== name`` lines split a script's output into its steps."""
    found: dict[str, str] = {}
    name = "start"
    for line in output.splitlines():
        if line.startswith("== "):
            name = line[3:]
            found[name] = ""
        else:
            found[name] = found.get(name, "") + line + "\n"
    return found


def test_a_push_under_another_name_is_held_until_the_owner_decides(
    sandbox: SandboxSetup, tmp_path: Path
) -> None:
    config = load_server_config(sandbox.config(egress_approvals={"timeout_s": TIMEOUT_S}))
    podman = PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
    server = GitHttpServer(tmp_path / "served")
    server.root.mkdir()
    bare = server.bare_repo("repo.git")
    owner = Owner(server, bare)
    podman.set_egress_ask(owner)

    async def go() -> None:
        await server.start()
        relay = Relay(sandbox.egress.gateway, server.port)
        url = f"{relay.url}/repo.git"
        push = f"(cd /tmp/w && /tmp/g push {url} main 2>&1; echo exit=$?)"
        context = make_context(tmp_path / "ctx", (EgressRule(relay.host, ports=(relay.port,)),))
        try:
            # One script, four steps (each exec costs seconds): denied, allowed, read,
            # and a push nobody answers.
            owner.answers = ["deny", "allow", "silent"]
            said, code = await run(
                podman, context,
                f"{MAKE_COMMIT} && echo == denied && {push} && echo == allowed && {push} "
                f"&& echo == read && /tmp/g ls-remote {url} && /tmp/g clone -q {url} /tmp/c 2>&1 "
                "&& cd /tmp/c && /tmp/g fetch -q origin 2>&1 && /tmp/g log -1 --format=%s "
                f"&& echo == unanswered && cd /tmp/w && /tmp/g {AGENT} commit -q --allow-empty "
                f"-m second && {push}",
            )  # fmt: skip
            assert code == 0, said
            steps = sections(said)
            assert set(steps) == {"start", "denied", "allowed", "read", "unanswered"}, said
            commit = steps["start"].split()[-1]

            # Denied: git says why; the server's branch was still missing when the next
            # push was asked about.
            assert "exit=0" not in steps["denied"], said
            assert "[remote rejected] main -> main" in steps["denied"], said
            assert "gateway-bot: not approved: not now" in steps["denied"], said
            held = owner.asked[0]
            assert (held.method, held.host, held.port, held.path) == (
                "POST", relay.host, relay.port, "/repo.git/git-receive-pack",
            )  # fmt: skip
            assert held.context_id == "pusher"
            assert held.refs == (RefUpdate("refs/heads/main", ZERO_SHA, commit),)
            assert held.commit_subjects == ("the pushed commit",)
            assert owner.branch_when_asked[:2] == [None, None]

            # Allowed: the commit landed.
            assert "exit=0" in steps["allowed"], said
            assert owner.branch_when_asked[2] == commit
            assert server.subject(bare, commit) == "the pushed commit"

            # Reading is never held: ls-remote, clone and fetch went straight through.
            assert steps["read"].splitlines()[-1] == "the pushed commit", said
            assert [a.path for a in owner.asked].count("/repo.git/git-receive-pack") == 3

            # Nobody answered: refused when the time was up, and the ask was withdrawn.
            assert "exit=0" not in steps["unanswered"], said
            assert f"no decision within {TIMEOUT_S} s" in steps["unanswered"], said
            assert owner.cancelled == 1
            assert server.ref(bare, "refs/heads/main") == commit

            # The daemon goes away while a push waits: refused, not left to a later answer.
            # Its next start binds afresh and asks again, with a new id.
            owner.answers = ["silent", "allow"]
            owner.waiting.clear()
            pending = asyncio.create_task(run(podman, context, push))
            await asyncio.wait_for(owner.waiting.wait(), DEADLINE_S)
            await podman.egress_asks.close()
            said, _ = await pending
            assert "exit=0" not in said, said
            assert "stopped while the request waited for approval" in said, said
            assert server.ref(bare, "refs/heads/main") == commit
            said, _ = await run(podman, context, push)  # the task's start binds again
            assert "exit=0" in said, said
            assert server.subject(bare, "refs/heads/main") == "second"
            assert len({held.id for held in owner.asked}) == len(owner.asked) == 5
        finally:
            await podman.close()
            relay.close()
            await server.close()

    asyncio.run(go())

    # The network log (the dashboard's network page) shows each push held, then decided.
    entries = [
        json.loads(line) for line in (tmp_path / "ctx" / "network.log").read_text().splitlines()
    ]
    pushes = [e for e in entries if e["url"].endswith("/git-receive-pack")]
    assert [e.get("held", False) for e in pushes[:2]] == [True, False]
    assert pushes[1]["allowed"] is False
    assert pushes[1]["reason"] == "not approved: not now"
    assert any(e["allowed"] and e["reason"].startswith("approved") for e in pushes)
    assert not any(e.get("held") for e in entries if "git-upload-pack" in e["url"])
