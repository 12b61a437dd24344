"""Attacks on the daemon's control socket (the one `gateway-bot approve` uses), in-process
with the fast tier's core: another local user can neither reach it nor, should its
permissions ever be loosened, be heard by it; a stale socket left by a dead daemon is
replaced, a live daemon's is not taken over; --as grants nothing by itself."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_bot.cli.approvals import run_decision
from gateway_bot.core.application import Application
from gateway_bot.core.live_state import DaemonLiveState
from gateway_bot.runtime.control_socket import ControlServer, ask_daemon, socket_path
from tests.core.conftest import World
from tests.integration.dashboard.test_dashboard_security import NoContainers

NOBODY = 65534
CONNECT_AS_NOBODY = """
import json, socket, sys
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    client.connect(sys.argv[1])
except PermissionError:
    print("refused by the filesystem")
    sys.exit(0)
request = {"op": "decide", "code": sys.argv[2], "choice": "allow", "as": "owner"}
try:
    client.sendall(json.dumps(request).encode() + b"\\n")
except BrokenPipeError:
    pass  # the daemon answered and hung up before reading: the answer is still there
print(client.makefile().readline())
"""


@pytest.fixture
async def world_and_state() -> AsyncIterator[tuple[World, Path, ControlServer]]:
    """A state directory other users could traverse (as /var/lib/... would be), so only
    the control directory's own permissions stand between them and the socket."""
    base = Path(tempfile.mkdtemp(prefix="gwb-control-"))
    os.chmod(base, 0o755)
    world = World(base)
    await world.start()
    assert world.service is not None
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, NoContainers()),  # type: ignore[arg-type]
        service=world.service,
    )
    server = ControlServer(application, base / "state")
    await server.start()
    yield world, base / "state", server
    await server.stop()
    await world.close()
    shutil.rmtree(base)


async def held_code(world: World) -> tuple[str, str]:
    message = await world.say("let me in", sender="stranger")
    await world.until(lambda: world.channel.texts("owners", "card"), "the approval card")
    [approval] = await world.store.pending_approvals()
    return message, approval.code


def as_nobody(path: Path, code: str) -> str:
    done = subprocess.run(
        # The system Python: the project's venv is under root's home, closed to others.
        [
            shutil.which("python3", path="/usr/bin:/bin") or "python3",
            "-c",
            CONNECT_AS_NOBODY,
            str(path),
            code,
        ],
        capture_output=True,
        text=True,
        user=NOBODY,
        group=NOBODY,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another user needs root")
async def test_another_local_user_cannot_decide(
    world_and_state: tuple[World, Path, ControlServer],
) -> None:
    world, state_dir, _ = world_and_state
    path = socket_path(state_dir)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600
    _, code = await held_code(world)
    said = await asyncio.to_thread(as_nobody, path, code)
    assert said.strip() == "refused by the filesystem"

    path.parent.chmod(0o755)  # loosened by mistake: the daemon still checks who is calling
    path.chmod(0o666)
    said = await asyncio.to_thread(as_nobody, path, code)
    assert "Only the daemon's own user may use this socket." in said
    assert [a.code for a in await world.store.pending_approvals()] == [code]


async def test_as_names_an_identity_the_owners_list_must_hold(
    world_and_state: tuple[World, Path, ControlServer],
) -> None:
    world, state_dir, _ = world_and_state
    message, code = await held_code(world)
    request = {"op": "decide", "code": code, "choice": "allow"}
    answer = await asyncio.to_thread(ask_daemon, state_dir, {**request, "as": "stranger"})
    assert answer == {
        "ok": False,
        "text": "stranger is not an owner or admin of this bot: nothing was decided.",
    }
    answer = await asyncio.to_thread(ask_daemon, state_dir, {**request, "choice": "maybe"})
    assert answer["ok"] is False
    answer = await asyncio.to_thread(ask_daemon, state_dir, {**request, "as": "owner"})
    assert answer["ok"] is True, answer
    assert (await world.reply(message)).text == "Echo: let me in"


async def test_approve_as_a_non_owner_tells_nothing_of_which_codes_exist(
    world_and_state: tuple[World, Path, ControlServer], capsys: pytest.CaptureFixture[str]
) -> None:
    world, state_dir, _ = world_and_state
    message, code = await held_code(world)

    async def approve(code: str, as_: str) -> tuple[int, str]:
        """`gateway-bot approve CODE --as AS_`: its exit status and what it printed."""
        status = await asyncio.to_thread(run_decision, state_dir, code, "allow", as_)
        printed = capsys.readouterr()
        return status, printed.out + printed.err

    refused = (1, "stranger is not an owner or admin of this bot: nothing was decided.\n")
    # It used to answer "There is no approval ..." for a made-up code and "... not an owner
    # or admin on fake" for a real one: a probe for which codes exist, and on which channel.
    assert await approve(code, "stranger") == refused
    assert await approve("0123456789ab", "stranger") == refused
    assert await approve(code, "owner") == (
        0,
        "Allowed Stranger in Room dm (dm): running 1 held message(s).\n",
    )
    assert await approve(code, "stranger") == refused, "nor whether it was decided"
    # An owner is still told.
    assert await approve("0123456789ab", "owner") == (1, "There is no approval 0123456789ab.\n")
    assert await approve(code, "owner") == (1, f"Approval {code} was already allowed.\n")
    assert (await world.reply(message)).text == "Echo: let me in"


async def test_a_stale_socket_is_replaced_and_a_live_one_is_not_taken_over(
    world_and_state: tuple[World, Path, ControlServer],
) -> None:
    world, state_dir, running = world_and_state
    second = ControlServer(running.application, state_dir)
    with pytest.raises(OSError, match="another daemon already listens"):
        await second.start()
    message, code = await held_code(world)  # the first still answers
    await running.stop()

    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_path(state_dir)))  # a daemon killed with -9 leaves this behind
    stale.close()
    await second.start()
    try:
        request = {"op": "decide", "code": code, "choice": "allow", "as": "owner"}
        answer = await asyncio.to_thread(ask_daemon, state_dir, request)
        assert answer["ok"] is True, answer
        assert (await world.reply(message)).text == "Echo: let me in"
    finally:
        await second.stop()


async def test_a_deep_state_directory_still_gets_its_socket(tmp_path: Path) -> None:
    """A socket address holds 107 bytes; state directories are often deeper than that."""
    world = World(tmp_path)
    await world.start()
    assert world.service is not None
    application = Application(
        world.store,
        DaemonLiveState({world.channel.name: world.channel}, NoContainers()),  # type: ignore[arg-type]
        service=world.service,
    )
    state_dir = tmp_path / ("deep-" * 20) / "state"
    assert len(str(socket_path(state_dir))) > 108
    server = ControlServer(application, state_dir)
    await server.start()
    try:
        message, code = await held_code(world)
        request = {"op": "decide", "code": code, "choice": "allow", "as": "owner"}
        answer = await asyncio.to_thread(ask_daemon, state_dir, request)
        assert answer["ok"] is True, answer
        assert (await world.reply(message)).text == "Echo: let me in"
    finally:
        await server.stop()
        await world.close()
    assert not socket_path(state_dir).exists(), "removed when the daemon stops"
