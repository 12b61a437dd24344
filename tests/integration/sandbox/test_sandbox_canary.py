"""The canary proves from inside that the sandbox confines the agent: a shell started the
way agent processes are reports its hostname, the host paths it can see, and whether
direct connections to host-side listeners get anywhere. And it notices when they do."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.base import ExecutionContext
from gateway_bot.sandbox.canary import Target, probe
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.conftest import gateway_env, write_config
from tests.support.sandbox_fixtures import SandboxSetup


def run_check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway_bot", "check", "--sandbox", "--config", str(config)],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=600,
    )


def test_check_sandbox_proves_confinement_from_inside(sandbox: SandboxSetup) -> None:
    result = run_check(sandbox.config())
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "ok   ran inside the conversation's container (hostname gwb-canary-" in out
    assert "ok   host paths invisible" in out
    assert "ok   the workspace is mounted nosuid,nodev" in out
    assert "ok   container root is not host root (uid map 0:100000:65536)" in out
    assert "ok   direct connection to IPv4, the host's side of the egress network: no" in out
    assert "ok   direct connection to IPv6 link-local" in out
    assert out.rstrip().endswith("the sandbox confines the agent")
    assert not sandbox.containers(), "the canary's container is gone afterwards"


def test_check_sandbox_says_plainly_when_there_is_no_sandbox(
    tmp_path: Path, target_repo: Path, fake_api
) -> None:
    result = run_check(write_config(tmp_path, target_repo, fake_api, sandbox={"kind": "none"}))
    assert result.returncode == 2
    assert "FAIL NOT sandboxed: sandbox.kind is 'none'" in result.stdout


def test_the_canary_reports_a_connection_that_gets_through(sandbox: SandboxSetup) -> None:
    """The proxy is the one address the agent may dial directly: the canary must see it."""
    config = load_server_config(sandbox.config())
    podman = PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
    root = sandbox.tmp_path / "canary-ctx"
    dirs = {name: root / name for name in ("workspace", "home", "inbox", "outbox", "storage")}
    for path in dirs.values():
        path.mkdir(parents=True)
    context = ExecutionContext(id="canary-control", **dirs)

    async def go() -> list[str]:
        report = await probe(
            podman, context, [str(sandbox.tmp_path)], [(Target("proxy", "proxy", 8080), None)]
        )
        await podman.close()
        assert report.finished
        assert report.hostname == "gwb-canary-control"
        assert report.visible_host_paths == []
        return report.connected

    assert asyncio.run(go()) == ["proxy/8080"]
