"""Ask rules, the git push reader and the daemon's ask socket, without containers.

The proxy is less trusted than the daemon, and what a push carries is the agent's: each
test here is written as what a hostile agent or a compromised proxy would try. The whole
path through real podman and mitmproxy is in tests/integration/sandbox/test_sandbox_egress_asks.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.sandbox.egress.allowlist import parse_allowlist
from gateway_bot.sandbox.egress.git_push import (
    MAX_REFS,
    ZERO_SHA,
    RefUpdate,
    parse_push,
    pkt_line,
    refusal_report,
)
from gateway_bot.sandbox.egress.held import HeldRequest
from gateway_bot.sandbox.egress.rules import (
    ASK,
    GIT_PUSH_ASK,
    EgressRule,
    ask_rule_for,
    decide,
    decide_address,
    decide_connect,
    decide_raw_stream,
)
from gateway_bot.sandbox.podman.egress_asks import SOCKET_NAME, EgressAskListener, parse_ask
from tests.conftest import GIT_IDENTITY

OPEN = EgressRule("git.example.org")
_COMMAND = pkt_line(f"{ZERO_SHA} {'1' * 40} refs/heads/x\n".encode())
PUSH = "/team/repo.git/git-receive-pack"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", PUSH),
        ("post", PUSH),  # a server may take the method in any case
        ("POST", PUSH + "?x=1"),
        ("POST", "/team/repo.git//git-receive-pack"),
        ("POST", "/team/x/../repo.git/git-receive-pack"),
        ("POST", "/team/repo.git/%67it-receive-pack"),  # %67 is g
        ("POST", "/team/repo.git%2fgit-receive-pack"),  # unreadable one way: asks
        # The attacks a forgiving server routes to receive-pack all the same:
        ("POST", PUSH + ";jsessionid=1"),  # servlet containers drop ;parameters (Gerrit)
        ("POST", "/team/repo.git;x/git-receive-pack;y"),
        ("POST", PUSH + "/"),  # a router that ignores a trailing slash
        ("POST", "/team/repo.git/GIT-Receive-Pack"),  # IIS routes in any case (Azure DevOps)
        ("POST", PUSH + "%3bx"),  # an encoded ; decoded, then dropped
    ],
)
def test_every_spelling_of_a_push_is_held(method: str, path: str) -> None:
    assert ask_rule_for((OPEN, GIT_PUSH_ASK), method, ["git.example.org"], path, 443)


def test_an_ask_for_a_host_holds_requests_fronted_to_it() -> None:
    """The Host header names the asked host while the proxy connects elsewhere (a CDN that
    routes by Host): held all the same."""
    rules = (OPEN, EgressRule("git.example.org", methods=("POST",), action=ASK))
    hosts = ["front.example.net", "git.example.org"]
    assert ask_rule_for(rules, "POST", hosts, "/anything", 443) is not None
    assert ask_rule_for(rules, "POST", hosts[:1], "/anything", 443) is None


def test_fetches_and_clones_are_never_held() -> None:
    rules = (OPEN, GIT_PUSH_ASK)
    for method, path in (
        ("GET", "/team/repo.git/info/refs?service=git-receive-pack"),
        ("GET", "/team/repo.git/info/refs?service=git-upload-pack"),
        ("POST", "/team/repo.git/git-upload-pack"),
    ):
        assert ask_rule_for(rules, method, ["git.example.org"], path, 443) is None


def test_an_ask_rule_opens_nothing() -> None:
    """A repo cannot widen its network with an ask rule: the host stays closed, tunnels and
    private addresses too."""
    only_ask = (EgressRule("internal.example.org", action=ASK), EgressRule("10.0.0.5", action=ASK))
    assert not decide(only_ask, "POST", "internal.example.org", "/x").allowed
    assert not decide_connect(only_ask, "internal.example.org", 443).allowed
    assert not decide_address(only_ask, "10.0.0.5", "10.0.0.5").allowed


def test_a_push_over_ssh_cannot_pass_an_ask_for_pushes() -> None:
    """ssh (or any stream the proxy cannot read) to a host an ask rule names is refused, even
    where a bare allow rule would let any stream through."""
    assert decide_raw_stream((OPEN,), "git.example.org", 22).allowed  # control
    assert not decide_raw_stream((OPEN, GIT_PUSH_ASK), "git.example.org", 22).allowed
    narrow = EgressRule("other.example.org", methods=("POST",), action=ASK)
    assert decide_raw_stream((OPEN, narrow), "git.example.org", 22).allowed


def test_the_server_default_asks_before_every_push_and_is_configurable() -> None:
    settings = SandboxSettings()
    [rule] = settings.egress_approvals.ask
    assert (rule.host, rule.paths, rule.methods) == ("*", ["*/git-receive-pack"], ["POST"])
    assert settings.egress_approvals.timeout_s == 600
    quiet = SandboxSettings.model_validate({"egress_approvals": {"ask": [], "timeout_s": 5}})
    assert quiet.egress_approvals.ask == []
    with pytest.raises(ValueError, match="not an HTTP method"):
        SandboxSettings.model_validate(
            {"egress_approvals": {"ask": [{"host": "x", "methods": ["P T"]}]}}
        )


def test_a_repo_may_add_ask_rules_and_nothing_else() -> None:
    text = (
        "allow:\n  - api.example.org\n"
        "ask:\n  - host: api.example.org\n    methods: [post, DELETE]\n    paths: ['/v1/*']\n"
        "  - deploy.example.org\n"
    )
    rules = parse_allowlist(text, [EgressRule("model.example", ports=(443,))])
    assert rules[-2:] == (
        EgressRule("api.example.org", ("/v1/*",), ("POST", "DELETE"), action=ASK),
        EgressRule("deploy.example.org", action=ASK),
    )
    assert [r.action for r in rules[:2]] == ["allow", "allow"]
    for bad in ("ask: {host: x}\n", "ask:\n  - host: x\n    action: allow\n", "deny: [x]\n"):
        with pytest.raises(ConfigError):
            parse_allowlist(bad, [])


def test_rules_survive_the_trip_to_the_proxy() -> None:
    rule = EgressRule("*", ("*/git-receive-pack",), ("POST",), (443,), action=ASK)
    assert EgressRule.from_json(json.loads(json.dumps(rule.to_json()))) == rule
    with pytest.raises(ValueError, match="unknown rule action"):
        EgressRule.from_json({"host": "x", "action": "maybe"})


def _git(repo: Path, *args: str, stdin: bytes = b"") -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), *GIT_IDENTITY, *args], input=stdin, capture_output=True, check=True
    ).stdout


def _push_body(tmp_path: Path, capabilities: str) -> tuple[bytes, str]:
    repo = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for subject in ("first commit", "second commit"):
        _git(repo, "commit", "-q", "--allow-empty", "-m", subject)
    head = _git(repo, "rev-parse", "HEAD").decode().strip()
    pack = _git(repo, "pack-objects", "--stdout", "--revs", "-q", stdin=b"HEAD\n")
    command = f"{ZERO_SHA} {head} refs/heads/main\0{capabilities}\n".encode()
    return pkt_line(command) + b"0000" + pack, head


def test_a_push_body_shows_its_refs_and_commits(tmp_path: Path) -> None:
    body, head = _push_body(tmp_path, "report-status side-band-64k agent=git/2.39")
    push = parse_push(body)
    assert push.refs == (RefUpdate("refs/heads/main", ZERO_SHA, head),)
    assert push.refs[0].kind == "create"
    assert push.commit_subjects == ("second commit", "first commit")
    assert push.commits_complete
    # Cut anywhere, it still never raises and never invents a ref.
    for cut in range(0, len(body), 7):
        partial = parse_push(body[:cut])
        assert set(partial.refs) <= set(push.refs)


def test_hostile_push_bodies_are_read_without_harm() -> None:
    for body in (
        b"",
        b"zzzz",
        b"0003",
        b"ffff" + b"a" * 10,
        pkt_line(b"not a command\n") + b"0000",
        _COMMAND + b"0000PACK\0\0\0\2\xff\xff\xff\xff",  # four billion objects
        _COMMAND + b"0000PACK\0\0\0\2\0\0\0\1\x9f",  # a header cut short
    ):
        parse_push(body)
    bomb = pkt_line(f"{ZERO_SHA} {'1' * 40} refs/heads/x\0report-status\n".encode()) * 500
    assert len(parse_push(bomb).refs) == 100


def _card_of(body: bytes) -> str:
    """What the person deciding reads for this push (the daemon's parse of the proxy's ask)."""
    line = _ask_line(body)
    return parse_ask(line, "id-1", lambda context: context == "conv-1").describe()


def test_a_ref_hidden_behind_a_spelling_git_accepts_is_on_the_card(tmp_path: Path) -> None:
    """The attack: a benign ref first, then ``refs/heads/main`` written in upper-case hex.
    git's receive-pack reads both and applies both; the card must name both."""
    body, head = _push_body(tmp_path, "report-status")
    flush = int(body[:4], 16)  # past the one command: its flush, then the pack
    hidden = pkt_line(f"{ZERO_SHA} {head.upper()} refs/heads/main\n".encode())
    benign = pkt_line(f"{ZERO_SHA} {head} refs/heads/feature\0report-status\n".encode())
    attack = benign + hidden + body[flush:]
    bare = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(
        ["git", "receive-pack", "--stateless-rpc", str(bare)], input=attack, check=True,
        capture_output=True,
    )  # fmt: skip
    assert _git(bare, "rev-parse", "refs/heads/main").decode().strip() == head
    card = _card_of(attack)
    assert f"create refs/heads/main at {head[:12]}" in card
    assert f"create refs/heads/feature at {head[:12]}" in card
    assert "could not be read" not in card
    # A funny ref name git itself refuses does not hide the refs after it either.
    funny = pkt_line(f"{ZERO_SHA} {head} refs/heads/a b\nupdate refs/heads/x\n".encode())
    card = _card_of(benign + funny + hidden + body[flush:])
    assert f"create refs/heads/main at {head[:12]}" in card
    assert "\nupdate refs/heads/x" not in card  # a name cannot forge a line of the card


def test_a_push_with_more_refs_than_were_read_says_so(tmp_path: Path) -> None:
    body, head = _push_body(tmp_path, "report-status")
    pack = body[int(body[:4], 16) :]  # the flush, then the pack
    many = b"".join(
        pkt_line(f"{ZERO_SHA} {head} refs/heads/b{n}\n".encode()) for n in range(MAX_REFS)
    )
    assert "could not be read" not in _card_of(many + pack)
    last = pkt_line(f"{ZERO_SHA} {head} refs/heads/main\n".encode())
    card = _card_of(many + last + pack)  # the 101st ref
    assert "could not be read" in card.splitlines()[1]  # before the refs: a card is cut
    padded = pkt_line(f"{ZERO_SHA} {head} refs/heads/{'x' * 65000}\n".encode())
    cut = (padded * 17 + last + pack)[: 1024 * 1024]  # what the proxy passes on
    assert "could not be read" in _card_of(cut)
    certificate = pkt_line(b"push-cert\0report-status\n") + last + pack
    assert "refs not readable" in _card_of(certificate)


def test_a_refusal_is_a_rejection_git_prints(tmp_path: Path) -> None:
    body, _ = _push_body(tmp_path, "report-status side-band-64k")
    report = refusal_report(parse_push(body), "gateway-bot: not approved: no")
    assert report is not None
    assert b"\x02gateway-bot: not approved: no\n" in report
    assert b"ng refs/heads/main gateway-bot: not approved: no\n" in report
    plain = refusal_report(parse_push(body.replace(b" side-band-64k", b"")), "no")
    assert plain is not None
    assert plain.startswith(pkt_line(b"unpack ok\n"))
    assert refusal_report(parse_push(b"0000"), "no") is None  # no refs: a 403 instead


# -- the daemon's socket ----------------------------------------------------------------------


def _ask_line(push: bytes, **changes: object) -> bytes:
    ask: dict[str, object] = {
        "context": "conv-1",
        "method": "POST",
        "scheme": "https",
        "host": "git.example.org",
        "port": 443,
        "path": PUSH,
        "rule": GIT_PUSH_ASK.describe(),
        "body": base64.b64encode(push).decode(),
        "body_size": len(push),
        **changes,
    }
    return json.dumps(ask).encode() + b"\n"


@pytest.fixture(scope="module")
def push_body(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str]:
    return _push_body(tmp_path_factory.mktemp("push"), "report-status")


async def _connect(
    listener: EgressAskListener,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """As the proxy does, by a short path (the directory's may be past the 108-byte limit)."""
    directory = os.open(listener.directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return await asyncio.open_unix_connection(f"/proc/self/fd/{directory}/{SOCKET_NAME}")
    finally:
        os.close(directory)


async def _exchange(listener: EgressAskListener, line: bytes) -> dict[str, object] | None:
    reader, writer = await _connect(listener)
    writer.write(line)
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 30)
    writer.close()
    return json.loads(answer) if answer else None


def _listener(directory: Path, timeout_s: float = 30) -> EgressAskListener:
    return EgressAskListener(directory, lambda context: context == "conv-1", timeout_s)


def test_the_seam_gets_the_push_and_its_answer_goes_back(
    tmp_path: Path, push_body: tuple[bytes, str]
) -> None:
    asked: list[HeldRequest] = []

    async def decide_push(held: HeldRequest) -> tuple[bool, str]:
        asked.append(held)
        return held.refs[0].ref == "refs/heads/main", "owner said yes"

    async def go() -> list[dict[str, object] | None]:
        # A long directory: the socket is bound through /proc/self/fd, past the 108-byte limit.
        listener = _listener(tmp_path / ("d" * 90) / "egress")
        listener.ask = decide_push
        await listener.start()
        try:
            return [await _exchange(listener, _ask_line(push_body[0])) for _ in range(2)]
        finally:
            await listener.close()

    first, second = asyncio.run(go())
    assert first is not None
    assert second is not None
    assert (first["allow"], first["reason"]) == (True, "owner said yes")
    assert first["id"] != second["id"], "every held request gets its own id"
    held = asked[0]
    assert (held.context_id, held.method, held.host, held.port, held.path) == (
        "conv-1", "POST", "git.example.org", 443, PUSH,
    )  # fmt: skip
    assert held.refs == (RefUpdate("refs/heads/main", ZERO_SHA, push_body[1]),)
    assert held.commit_subjects == ("second commit", "first commit")
    assert "create refs/heads/main" in held.describe()
    assert held.id == first["id"]


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b'{"context": NaN}\n',
        b'{"context": "conv-1"',  # no end of line, then end of file
        b'{"context": "conv-1", "context": "conv-1"}\n',
        b"[" * (2 * 1024 * 1024 + 10),  # past the line limit
    ],
)
def test_a_malformed_ask_is_refused_without_asking(
    tmp_path: Path, line: bytes, push_body: tuple[bytes, str]
) -> None:
    asked: list[HeldRequest] = []

    async def record(held: HeldRequest) -> bool:
        asked.append(held)
        return True

    async def go() -> dict[str, object] | None:
        listener = _listener(tmp_path)
        listener.ask = record
        await listener.start()
        try:
            reader, writer = await _connect(listener)
            writer.write(line)
            writer.write_eof()
            answer = await asyncio.wait_for(reader.readline(), 30)
            writer.close()
            return json.loads(answer) if answer else None
        finally:
            await listener.close()

    answer = asyncio.run(go())
    assert answer is None or answer["allow"] is False  # no answer is a refusal too
    assert asked == []


@pytest.mark.parametrize(
    "changes",
    [
        {"context": "conv-2"},  # a context this sandbox does not route
        {"context": "../conv-1"},
        {"port": True},
        {"port": 70000},
        {"method": "PO ST"},
        {"scheme": "file"},
        {"body": "!!!"},
        {"extra": 1},
        {"path": "/x\n/y"},
    ],
)
def test_an_ask_the_daemon_cannot_vouch_for_is_refused(
    tmp_path: Path, changes: dict[str, object], push_body: tuple[bytes, str]
) -> None:
    async def never(held: HeldRequest) -> bool:
        raise AssertionError("asked")

    async def go() -> dict[str, object] | None:
        listener = _listener(tmp_path)
        listener.ask = never
        await listener.start()
        try:
            return await _exchange(listener, _ask_line(push_body[0], **changes))
        finally:
            await listener.close()

    answer = asyncio.run(go())
    assert answer is not None
    assert (answer["allow"], answer["reason"]) == (False, "malformed approval request")


def test_without_a_seam_or_an_answer_the_request_is_refused(
    tmp_path: Path, push_body: tuple[bytes, str]
) -> None:
    cancelled = asyncio.Event()

    async def silent(held: HeldRequest) -> bool:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    async def go() -> tuple[dict[str, object] | None, dict[str, object] | None]:
        listener = _listener(tmp_path, timeout_s=0.5)
        await listener.start()
        try:
            unset = await _exchange(listener, _ask_line(push_body[0]))
            listener.ask = silent
            expired = await _exchange(listener, _ask_line(push_body[0]))
            await asyncio.wait_for(cancelled.wait(), 30)
            return unset, expired
        finally:
            await listener.close()

    unset, expired = asyncio.run(go())
    assert unset is not None
    assert expired is not None
    assert (unset["allow"], unset["reason"]) == (
        False, "no approval service is set up for network writes",
    )  # fmt: skip
    assert (expired["allow"], expired["reason"]) == (False, "no decision within 0.5 s")


def test_a_dropped_request_withdraws_its_ask_and_a_restart_rebinds(
    tmp_path: Path, push_body: tuple[bytes, str]
) -> None:
    """The proxy letting go (its restart) cancels the pending ask; a daemon that stops
    while a request waits closes the connection, which the proxy takes as a refusal; the
    next daemon binds afresh over the socket left behind (a link planted there included)."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def waits(held: HeldRequest) -> bool:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    async def go() -> bytes:
        listener = _listener(tmp_path)
        listener.ask = waits
        await listener.start()
        reader, writer = await _connect(listener)
        writer.write(_ask_line(push_body[0]))
        await asyncio.wait_for(started.wait(), 30)
        writer.close()  # the proxy went away
        await asyncio.wait_for(cancelled.wait(), 30)
        started.clear()
        reader, writer = await _connect(listener)
        writer.write(_ask_line(push_body[0]))
        await asyncio.wait_for(started.wait(), 30)
        await listener.close()  # the daemon stops while it waits
        left = await asyncio.wait_for(reader.read(), 30)
        os.symlink(tmp_path / "elsewhere", listener.path)
        again = _listener(tmp_path)
        again.ask = _yes
        await again.start()
        try:
            answer = await _exchange(again, _ask_line(push_body[0]))
            assert answer is not None
            assert answer["allow"] is True
        finally:
            await again.close()
        assert not (tmp_path / "elsewhere").exists()
        return left

    assert asyncio.run(go()) == b"", "the waiting proxy sees the connection end: a refusal"
    assert not (tmp_path / SOCKET_NAME).exists()


async def _yes(held: HeldRequest) -> bool:
    return True
