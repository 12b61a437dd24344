"""The restart's one sweep of /proc for every running container (``strays.kill_all_but_inits``,
what ``reattach.py`` runs after a kill -9): what a dead daemon's agents left running ends in
each container, their inits live on, and nothing outside the containers is touched."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_bot.config.sandbox import LimitSettings, PodmanSettings
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.podman.containers import ContextNetwork, create_spec
from gateway_bot.sandbox.podman.service import PodmanService
from gateway_bot.sandbox.podman.strays import kill_all_but_init, kill_all_but_inits
from tests.support.sandbox_fixtures import current_image, podman, podman_run_flags, wait_until


def _init_flags(tmp: Path) -> list[str]:
    """The entrypoint, command and read-only mounts of PID 1 as the sandbox creates its
    containers (``containers.create_spec``), as ``podman run`` arguments."""
    context = ExecutionContext(
        id="c0ffee", workspace=tmp, home=tmp, inbox=tmp, outbox=tmp, storage=tmp
    )
    ca = tmp / "ca.crt"
    ca.write_text("not used\n")
    created = create_spec(
        context, "image", ContextNetwork("net", "10.0.0.2", "10.0.0.3"), "test", ca,
        LimitSettings(), PodmanService(PodmanSettings(), Path("/nonexistent")),
    )  # fmt: skip
    mounts = [
        f"--mount=type=bind,source={m['source']},target={m['target']},ro=true"
        for m in created["mounts"]
        if m.get("read_only")
    ]
    entrypoint = f"--entrypoint={json.dumps(created['entrypoint'])}"
    return [*mounts, entrypoint, "IMAGE", *created["command"]]


def _run_flags(tmp: Path, image: str) -> list[str]:
    return [image if flag == "IMAGE" else flag for flag in _init_flags(tmp)]


@pytest.fixture
def three_containers(sandbox_images: None, tmp_path: Path) -> Iterator[list[str]]:
    prefix = f"gwbt-sweep-{secrets.token_hex(3)}"
    names = [f"{prefix}-{n}" for n in range(3)]
    image = current_image("localhost/gateway-bot/agent")
    try:
        for name in names:
            podman(
                "run", "-d", "--name", name, *podman_run_flags(), "--network", "none",
                *_run_flags(tmp_path, image),
            )  # fmt: skip
        yield names
    finally:
        podman("rm", "-f", "-t", "0", *names, check=False)


def _commands(name: str) -> list[str]:
    """Every process of the container, as the host sees it (``podman top``)."""
    listed = podman("top", name, "args").stdout.splitlines()[1:]
    return [line.strip() for line in listed]


def _init_pid(name: str) -> int:
    return int(json.loads(podman("inspect", name).stdout)[0]["State"]["Pid"])


def test_one_sweep_ends_the_leftovers_of_every_container_and_nothing_else(
    three_containers: list[str],
) -> None:
    for name in three_containers:  # a dead daemon's agent and what it started
        podman("exec", "-d", name, "sh", "-c", "sleep 7001 & sleep 7002 & exec sleep 7003")
    for name in three_containers:
        wait_until(
            lambda name=name: sum("sleep 700" in c for c in _commands(name)) == 3,
            f"the three leftovers running in {name}",
        )
    outside = subprocess.Popen(["sleep", "7004"])  # the host's own: never the sweep's
    try:
        killed = kill_all_but_inits([_init_pid(name) for name in three_containers])
        assert killed >= 9, f"three leftovers in each of three containers, {killed} kills"
        for name in three_containers:
            left = _commands(name)
            assert not [c for c in left if "sleep 700" in c], f"{name} keeps {left}"
            assert left, f"{name}'s init was killed"
            assert podman("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true"
        assert outside.poll() is None, "a process outside the containers was killed"
    finally:
        outside.kill()
        outside.wait()


_OUTLIVE_THE_SWEEP = """
S=$(command -v sleep)
rm -f "$S"
printf '#!/bin/sh\\nexec tail -f /dev/null\\n' > "$S"
chmod +x "$S"
for p in /proc/[0-9]*; do
  case "$(tr '\\0' ' ' < "$p/cmdline" 2>/dev/null)" in "sleep "*) kill "${p#/proc/}";; esac
done
"""


def test_the_agent_cannot_have_init_start_its_program_and_outlive_the_sweep(
    three_containers: list[str],
) -> None:
    """The agent is root in its container and can replace any file of its image. Were
    PID 1 a loop starting the image's ``sleep`` (a child the sweep must spare), the agent
    would replace ``sleep``, end the running one, and have init start its own program,
    spared by every sweep: after each task, /stop and a restart. PID 1 starts nothing."""
    name = three_containers[0]
    podman("exec", name, "sh", "-c", _OUTLIVE_THE_SWEEP)
    podman("exec", "-d", name, "sh", "-c", "exec tail -f /dev/null")
    wait_until(
        lambda: any(c.startswith("tail -f") for c in _commands(name)),
        f"the agent's tail running in {name}",
    )
    kill_all_but_init(_init_pid(name))
    left = _commands(name)
    assert len(left) == 1, f"only init may be left in {name}: {left}"
    assert podman("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true"


_REUSED_PID = textwrap.dedent(
    """
    import os
    import subprocess
    from gateway_bot.sandbox.podman.strays import kill_all_but_init, kill_all_but_inits

    # The PIDs podman named as inits a moment ago, now someone else's: a process of the
    # daemon's own PID namespace, and one inside another container (not its PID 1).
    host = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["unshare", "--pid", "--fork", "sh", "-c", "sleep 60 & wait"])
    victim = subprocess.Popen(["sleep", "60"])
    inner = None
    while inner is None:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                status = open(f"/proc/{pid}/status").read()
            except OSError:
                continue
            if cmd == b"sleep\\x0060\\x00" and "NSpid:" in status:
                ids = [l for l in status.splitlines() if l.startswith("NSpid:")][0].split()
                if len(ids) == 3 and ids[-1] == "2":
                    inner = int(pid)
    kills = kill_all_but_inits([host.pid, inner]) + kill_all_but_init(host.pid)
    kills += kill_all_but_init(inner)
    # A real init (PID 1 of a namespace of its own) left in its caller's cgroup, as podman
    # leaves a container without cgroups: that cgroup is not the container's.
    uncontained = subprocess.Popen(["unshare", "--pid", "--fork", "sleep", "60"])
    first = None
    while first is None:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                parent = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
            except OSError:
                continue
            if int(parent) == uncontained.pid:  # unshare's child: PID 1 of its namespace
                first = int(pid)
    kills += kill_all_but_inits([first]) + kill_all_but_init(first)
    print(kills, victim.poll(), other.poll(), uncontained.poll(), flush=True)
    """
)


def test_an_init_pid_reused_by_another_process_sweeps_nothing() -> None:
    """The agent can end its container's init (``kill -TERM 1``: the init loop traps it),
    and its PID may go to another process between podman's listing and the sweep. Taken
    for an init, a process of the host's own PID namespace made every process on the
    machine a stray (the daemon included), one inside another container that container's
    processes. And a container left in its caller's cgroup shares it with host processes.
    Played in a PID namespace of its own, so that a failure kills only there."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _REUSED_PID],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["0", "None", "None", "None"], (
        f"kills, then the exit status of a host process, of the other container and of the "
        f"uncontained one: "
        f"{done.stdout!r} {done.stderr[-2000:]!r}"
    )
