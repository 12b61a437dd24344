"""Agent containers on two Podman hosts (``sandbox.podman.hosts``): conversations spread by
capacity, stay on their host across a daemon restart (same container ids), and wait for a
host that is down (the sender is told; nothing is recreated on the other host, whose
conversations keep working) until it is back.

The two hosts are two ``podman system service`` processes on this machine, each with its own
storage root, run root and socket under the test's temp dir: each sees only its own
containers, as another machine would. The images the session built are shared read-only
(``overlay.imagestore``): no copy, no build. Network definitions are this machine's (one
set), which both hosts see; the daemon only ever uses its own contexts' networks on each.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.support.fake_slack import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack
from tests.support.sandbox_fixtures import PODMAN, SandboxSetup, podman, wait_until

pytestmark = pytest.mark.slow

ALICE, DM = "U0ALICE", "D0ALICE"


class PodmanHost:
    """A Podman REST service with storage of its own, standing in for another machine."""

    def __init__(self, directory: Path, graph_root: str) -> None:
        directory.mkdir(parents=True)
        self.directory = directory
        # Podman refuses a run root longer than 50 characters: that one (and the socket
        # beside it) lives in a short directory of /tmp, removed with the host.
        self.short = Path(tempfile.mkdtemp(prefix="gwbh-", dir="/tmp"))
        self.socket = self.short / "podman.sock"
        self.url = f"unix://{self.socket}"
        self._storage = [
            "--root", str(directory / "root"), "--runroot", str(self.short / "run"),
            "--storage-driver", "overlay", "--storage-opt", f"overlay.imagestore={graph_root}",
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [PODMAN, "--runtime", "runc", *self._storage, "system", "service", "--time=0"]
        with (self.directory / "service.log").open("ab") as log:
            self.process = subprocess.Popen(
                [*argv, self.url], stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        process = self.process
        wait_until(
            lambda: (
                process.poll() is not None or self.remote("version", check=False).returncode == 0
            ),
            f"the podman service on {self.socket} answering",
        )
        log = (self.directory / "service.log").read_text()
        assert process.poll() is None, f"the podman service ended: {log}"

    def stop(self) -> None:
        """The service ends; its containers run on (conmon keeps them), unreachable."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
        self.process = None

    def remote(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return podman("--remote", "--url", self.url, *args, check=check)

    def containers(self, deployment: str) -> dict[str, str]:
        """This host's agent containers of ``deployment``: context id -> container id."""
        listed = self.remote(
            "ps", "-a", "--format", "json", "--filter", f"label=gateway-bot.deployment={deployment}"
        )
        return {
            entry["Labels"]["gateway-bot.context"]: entry["Id"]
            for entry in json.loads(listed.stdout or "[]")
            if entry["Labels"].get("gateway-bot.role") == "agent"
        }

    def remove_all(self, deployment: str) -> None:
        """Everything of ``deployment`` here, then the service and its storage's mount."""
        if self.process is None:
            self.start()
        listed = self.remote(
            "ps", "-aq", "--filter", f"label=gateway-bot.deployment={deployment}", check=False
        ).stdout.split()
        if listed:
            self.remote("rm", "-f", "-t", "0", *listed, check=False)
        self.stop()
        # conmon's exit commands (``podman --root THIS container cleanup``) would mount this
        # storage again after the umount, and a mount left in the temp dir fails the next
        # pytest run's clean-up of it: they end first.
        # conmon (``--exit-command-arg ROOT``) starts one of those when its container ends,
        # so they go too, and the unmounting repeats until nothing under this host is mounted.
        root = str(self.directory / "root")
        for _ in range(20):
            for pattern in (f"--root {root}", f"--exit-command-arg {root}"):
                subprocess.run(["pkill", "-KILL", "-f", "--", pattern], check=False)
            mounted = _mounts_under(self.directory)
            if not mounted:
                break
            for mount_point in mounted:
                subprocess.run(["umount", "-l", mount_point], capture_output=True)
            time.sleep(0.25)
        shutil.rmtree(self.short, ignore_errors=True)
        assert not _mounts_under(self.directory), "a mount of this host's storage is left"


def _mounts_under(directory: Path) -> list[str]:
    """Mount points below ``directory``, deepest first (mountinfo's fifth field)."""
    prefix = f"{directory}/"
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        points = [line.split()[4] for line in mountinfo]
    return sorted((point for point in points if point.startswith(prefix)), reverse=True)


@pytest.fixture
def two_hosts(sandbox: SandboxSetup, tmp_path: Path) -> Iterator[tuple[PodmanHost, PodmanHost]]:
    graph_root = podman("info", "--format", "{{.Store.GraphRoot}}").stdout.strip()
    hosts = (PodmanHost(tmp_path / "alpha", graph_root), PodmanHost(tmp_path / "beta", graph_root))
    try:
        for host in hosts:
            host.start()
        yield hosts
    finally:
        for host in hosts:
            host.remove_all(sandbox.deployment)


def _config(sandbox: SandboxSetup, alpha: PodmanHost, beta: PodmanHost, fake: FakeSlack) -> Path:
    hosts = [
        {"name": "alpha", "url": alpha.url, "capacity": 1},
        {"name": "beta", "url": beta.url, "capacity": 2},
    ]
    slack = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "team_ids": [TEAM],
        "allowed_users": [ALICE],
        "api_base_url": fake.base_url,
        "reconnect_max_delay_seconds": 1.0,
    }
    settings = {
        "kind": "podman",
        "deployment": sandbox.deployment,
        "egress_network": sandbox.egress.name,
        "podman": {"socket": str(sandbox.podman_socket), "hosts": hosts},
    }
    env = {
        "ANTHROPIC_BASE_URL": sandbox.relay.url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    return write_config(
        sandbox.tmp_path,
        sandbox.repo,
        sandbox.api,
        sandbox=settings,
        agent={"timeout_seconds": 120, "env": env},
        channels={"console": None, "slack": slack},
    )


def _start(gateway: Any, fake: FakeSlack, config: Path, hellos: int) -> Any:
    daemon = gateway("run", "--config", str(config))
    try:
        fake.wait_connected(hellos)
    except AssertionError:
        print(daemon.stderr)
        raise
    return daemon


def _status(gateway: Any, config: Path) -> str:
    status = gateway("status", "--config", str(config))
    assert status.wait() == 0, status.stderr
    return "\n".join(status.lines)


def test_conversations_spread_over_two_hosts_stay_there_and_wait_for_a_host_that_is_down(
    gateway,
    sandbox: SandboxSetup,
    two_hosts: tuple[PodmanHost, PodmanHost],
    fake_slack: FakeSlack,
) -> None:
    alpha, beta = two_hosts
    fake_slack.add_user(ALICE, "Alice")
    fake_slack.add_channel(DM, im_with=ALICE)
    config = _config(sandbox, alpha, beta, fake_slack)
    daemon = _start(gateway, fake_slack, config, hellos=1)

    # Each DM thread is a conversation. Free capacity decides: the first goes to beta (2
    # free) though alpha is listed first, the second to alpha (1 free each: a tie goes to
    # the host listed first).
    threads = {}
    for word in ("first", "second"):
        threads[word] = fake_slack.user_says(ALICE, DM, f"{word} conversation")
        fake_slack.wait_for_reply(DM, threads[word], f"Echo: {word} conversation")
        on_alpha = alpha.containers(sandbox.deployment)
        on_beta = beta.containers(sandbox.deployment)
        if word == "first":
            assert (len(on_alpha), len(on_beta)) == (0, 1), (on_alpha, on_beta)
    assert (len(on_alpha), len(on_beta)) == (1, 1), (on_alpha, on_beta)
    assert set(on_alpha) != set(on_beta), "each conversation lives on one host"

    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr
    alpha.stop()  # the service ends; its container runs on, out of reach
    daemon = _start(gateway, fake_slack, config, hellos=2)

    fake_slack.user_says(ALICE, DM, "while alpha is down", thread_ts=threads["second"])
    notice = fake_slack.wait_for_reply(DM, threads["second"], "unreachable")
    assert re.search(r"host alpha is unreachable.*kept.*when the host is back", notice["text"])
    fake_slack.user_says(ALICE, DM, "beta still works", thread_ts=threads["first"])
    fake_slack.wait_for_reply(DM, threads["first"], "Echo: beta still works")
    assert beta.containers(sandbox.deployment) == on_beta, "reattached on beta, same ids"
    assert not [
        m for m in fake_slack.bot_posts(DM, threads["second"]) if "while alpha is down" in m["text"]
    ], "the waiting message ran nowhere: nothing was recreated on beta"
    wait_until(
        lambda: "host unreachable" in _status(gateway, config),
        "gateway-bot status showing alpha's conversation as unreachable",
    )
    shown = _status(gateway, config)
    assert re.search(r"gwb-\S+\s+\S+\s+host unreachable\s+alpha", shown), shown
    assert re.search(r"running\s+beta", shown), shown

    alpha.start()
    fake_slack.wait_for_reply(DM, threads["second"], "Echo: while alpha is down", timeout=120)
    assert alpha.containers(sandbox.deployment) == on_alpha, "reattached on alpha, same id"
    assert beta.containers(sandbox.deployment) == on_beta
    told = [m for m in fake_slack.bot_posts(DM, threads["second"]) if "unreachable" in m["text"]]
    assert len(told) == 1, "the sender is told once, not at every retry"
