"""``VolumeContextFiles`` against a real container whose directories are named volumes
(decision 0130), on this machine's Podman (the ssh:// host's path differs only in the
connection: test_ssh_host_no_shared_disk.py). The agent, root in the container, has left
links, a directory and an oversized file where the daemon reads and writes: what the
daemon gets, and what it writes where, is checked.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_bot.config.sandbox import PodmanSettings
from gateway_bot.sandbox.context_files import (
    DiffBase,
    FileRefused,
    GitOrigin,
    WorkspaceSetupFailed,
)
from gateway_bot.sandbox.host_files import HostContextFiles
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman.service import PodmanService
from gateway_bot.sandbox.podman.volume_files import VolumeContextFiles
from tests.support.sandbox_fixtures import SandboxSetup, podman

pytestmark = pytest.mark.slow
ULIMITS = ["--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:4096"]


@pytest.fixture
def context_id(sandbox: SandboxSetup) -> Iterator[str]:
    """A running container ``gwb-<id>`` with the context's five volumes mounted."""
    context = f"vf{secrets.token_hex(4)}"
    mounts = [f"--volume={n}:{t}" for n, t in spec.context_volumes(context).items()]
    podman(
        "run", "-d", "--runtime", "runc", "--network", "none",
        *ULIMITS,
        "--label", f"gateway-bot.deployment={sandbox.deployment}",
        "--label", "gateway-bot.role=test",
        "--name", spec.container_name(context), *mounts, _image_with_git(), "sleep", "infinity",
    )  # fmt: skip
    try:
        yield context
    finally:
        podman("rm", "-f", "-t", "0", spec.container_name(context), check=False)
        podman("volume", "rm", "-f", *spec.context_volumes(context), check=False)


def _image_with_git() -> str:
    """An agent image of this session with git (a repo's image may lack it)."""
    images = podman(
        "images", "--format", "{{.Repository}}:{{.Tag}}",
        "--filter", "reference=localhost/gateway-bot/agent",
    ).stdout.split()  # fmt: skip
    for image in images:
        probe = ["run", "--rm", "--runtime", "runc", "--network", "none", *ULIMITS, image]
        if podman(*probe, "sh", "-c", "command -v git", check=False).returncode == 0:
            return image
    raise AssertionError(f"no agent image with git among {images}")


def _files(sandbox: SandboxSetup, context: str, tmp_path: Path) -> VolumeContextFiles:
    service = PodmanService(PodmanSettings(socket=sandbox.podman_socket), tmp_path / "svc")

    async def ready() -> None:
        return None

    daemon_side = HostContextFiles(*(tmp_path / d for d in spec.DIRECTORIES))
    return VolumeContextFiles(service, context, ready, daemon_side)


def _in(context: str, script: str) -> str:
    done = podman("exec", spec.container_name(context), "sh", "-c", script, check=False)
    return done.stdout


def test_files_in_and_out_through_the_archive_api_never_follow_the_agents_links(
    sandbox: SandboxSetup, context_id: str, tmp_path: Path
) -> None:
    files = _files(sandbox, context_id, tmp_path)
    _in(
        context_id,
        "echo original > /root/target && ln -s /root/target /inbox/data.csv "
        "&& ln -s /root/target /outbox/schedule.json && mkdir /outbox/dir.json "
        "&& head -c 5000 /dev/zero > /outbox/big.json && echo '{}' > /outbox/fine.json "
        "&& mkdir -p /home/agent/.config/tool "
        "&& ln -s /root/target /home/agent/.config/tool/settings.json",
    )
    staged = tmp_path / "staged"
    staged.write_bytes(b"sent in")

    async def scenario() -> None:
        await PodmanService(PodmanSettings(socket=sandbox.podman_socket), tmp_path).ensure_running()
        name = await files.put_inbox(["data.csv", "data-2.csv"], staged)
        assert name == "data-2.csv", (
            "the agent's link keeps its name; nothing is written through it"
        )
        for planted in ("schedule.json", "dir.json", "big.json"):
            with pytest.raises(FileRefused):
                await files.take_outbox_file(planted, 4096)
        assert await files.take_outbox_file("fine.json", 4096) == b"{}\n"
        assert await files.take_outbox_file("absent.json", 4096) is None
        await files.put_home_file(".config/tool/settings.json", b'{"a": 1}')
        await files.make_home_dir(".codex")
        usage = await files.measure()
        assert dict(usage.by_directory)["inbox"] > 0

    asyncio.run(scenario())
    assert _in(context_id, "cat /root/target") == "original\n"
    assert _in(context_id, "cat /inbox/data-2.csv") == "sent in"
    assert _in(context_id, "ls -A /outbox") == "dir.json\n", "each file looked at is gone"
    settings = "/home/agent/.config/tool/settings.json"
    assert _in(context_id, f"test -L {settings} || cat {settings}") == '{"a": 1}'
    assert _in(context_id, "test -d /home/agent/.codex && echo yes") == "yes\n"

    # A collected conversation: its container goes, then its volumes with what they held.
    podman("rm", "-f", "-t", "0", spec.container_name(context_id))
    asyncio.run(files.remove())
    for volume in spec.context_volumes(context_id):
        assert podman("volume", "exists", volume, check=False).returncode == 1, volume


def test_the_workspace_is_cloned_and_compared_by_git_in_the_container(
    sandbox: SandboxSetup, context_id: str, tmp_path: Path
) -> None:
    mirror = tmp_path / "mirror"
    subprocess.run(
        ["git", "clone", "--quiet", "--mirror", str(sandbox.repo), str(mirror)], check=True
    )
    upstream = subprocess.run(
        ["git", "-C", str(mirror), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    branch = subprocess.run(
        ["git", "-C", str(mirror), "symbolic-ref", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    files = _files(sandbox, context_id, tmp_path)
    origin = GitOrigin(mirror, "https://git.example/repo.git", None)

    async def clone() -> bool:
        before = await files.workspace_exists()
        await files.ensure_workspace(origin)
        await files.ensure_workspace(origin)  # once: an existing workspace is left alone
        return before

    assert asyncio.run(clone()) is False
    assert _in(context_id, "git -C /workspace remote get-url origin") == (
        "https://git.example/repo.git\n"
    )
    _in(
        context_id,
        "cd /workspace && echo new > made.txt && git add made.txt "
        "&& git -c user.name=a -c user.email=a@b commit -qm 'the agent commits' "
        "&& echo untracked > loose.txt && printf 'ignored\\n' > .git/info/exclude "
        "&& echo hidden > ignored",
    )
    base = DiffBase(branch, upstream, mirror, tmp_path / "scratch")
    changes = asyncio.run(files.workspace_changes(base))
    assert f"HEAD is on {branch}." in changes.summary
    assert f"1 commit(s) not on origin's {branch}:" in changes.summary
    assert "the agent commits" in changes.summary
    assert "Uncommitted changes:\n  A loose.txt" in changes.summary
    assert "ignored" not in changes.summary
    assert "+new" in changes.patch
    assert "+untracked" in changes.patch
    _in(context_id, "rm -rf /workspace/.git")
    with pytest.raises(WorkspaceSetupFailed, match=r"no \.git any more"):
        asyncio.run(files.ensure_workspace(origin))
