"""A container start the podman service refuses. A refusal that passes (a server error, as
netavark's "No such file or directory" now and then on a busy host) is tried again and the
container runs; one that stays is the sandbox's own error naming podman's words, never an
"Internal error" carrying podman-py's exception (its APIError is no PodmanError, and
``except PodmanError`` let every refusal through). The refusal is made real: the source of
the container's bind mount is gone when it starts."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_bot.config.sandbox import PodmanSettings
from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman.container_calls import ContainerCalls
from gateway_bot.sandbox.podman.service import PodmanService
from tests.support.sandbox_fixtures import podman, podman_run_flags

IMAGE = "localhost/gateway-bot/base:bookworm"


@pytest.fixture
def mounting(tmp_path: Path, sandbox_images: None) -> Iterator[tuple[str, Path]]:
    """A created container whose bind mount's source is then removed: (name, source)."""
    source = tmp_path / "mounted"
    source.mkdir()
    name = f"gwb-test-start-{secrets.token_hex(4)}"
    podman(
        "create", "--name", name, *podman_run_flags(), "--network", "none",
        "--mount", f"type=bind,source={source},target=/mounted", IMAGE, "sleep", "infinity",
    )  # fmt: skip
    source.rmdir()
    try:
        yield name, source
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


async def _calls(podman_socket: Path, tmp_path: Path) -> ContainerCalls:
    service = PodmanService(PodmanSettings(socket=podman_socket), tmp_path / "logs")
    await service.ensure_running()
    return ContainerCalls(service, "test-start-refused")


async def test_a_start_refused_for_a_moment_is_tried_again_and_runs(
    mounting: tuple[str, Path], podman_socket: Path, tmp_path: Path
) -> None:
    name, source = mounting
    calls = await _calls(podman_socket, tmp_path)
    asyncio.get_running_loop().call_later(1.5, source.mkdir)  # the refusal passes

    await calls.start(name)

    running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
    assert running == "true"


async def test_a_start_refused_for_good_is_the_sandboxs_clear_error(
    mounting: tuple[str, Path], podman_socket: Path, tmp_path: Path
) -> None:
    name, source = mounting
    calls = await _calls(podman_socket, tmp_path)

    with pytest.raises(SandboxUnavailable, match=f"^podman could not start {name}: ") as refused:
        await calls.start(name)

    assert "no such file or directory" in str(refused.value).lower(), refused.value
    assert not source.exists()
