"""The podman service the daemon starts outlives the daemon's working directory: a daemon
run from a directory that is later removed (a checkout, a temp dir) must not leave a
service on which no container starts any more ("netavark: No such file or directory",
conmon "Failed to get working directory", for every daemon that used it after)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.sandbox_fixtures import podman, podman_run_flags

_START = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from gateway_bot.config.sandbox import PodmanSettings
    from gateway_bot.sandbox.podman.service import PodmanService

    socket, logs = Path(sys.argv[1]), Path(sys.argv[2])
    service = PodmanService(PodmanSettings(socket=socket), logs)
    asyncio.run(service.ensure_running())
    """
)


def test_containers_start_on_the_service_after_the_directory_it_was_started_from_is_gone(
    tmp_path: Path, sandbox_images: None
) -> None:
    socket, started_in = tmp_path / "svc" / "podman.sock", tmp_path / "checkout"
    started_in.mkdir()
    network, container = f"gwb-test-cwd-{os.getpid()}", f"gwb-test-cwd-{os.getpid()}"
    remote = ["--url", f"unix://{socket}"]
    limits = [f for f in podman_run_flags() if not f.startswith("--runtime")]  # the service's
    subprocess.run(
        [sys.executable, "-c", _START, str(socket), str(tmp_path / "logs")],
        cwd=started_in, check=True, timeout=120,
    )  # fmt: skip
    try:
        started_in.rmdir()  # the checkout the daemon ran from is removed
        podman(*remote, "network", "create", "--disable-dns", network)
        ran = podman(
            *remote, "run", "--rm", "--name", container, "--network", network,
            *limits, "localhost/gateway-bot/base:bookworm", "echo", "still works",
            check=False,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "still works" in ran.stdout
    finally:
        podman(*remote, "rm", "-f", "-t", "0", container, check=False)
        podman(*remote, "network", "rm", "-f", network, check=False)
        subprocess.run(["pkill", "-f", f"system service .*unix://{socket}"], check=False)
