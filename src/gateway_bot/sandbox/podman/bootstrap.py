"""``gateway-bot image bootstrap``: a Debian base image without any registry.

debootstrap fetches a minimal Debian from the host's apt mirror (which is reachable wherever
apt works), and ``podman import`` turns the tree into ``localhost/gateway-bot/base:bookworm``.
The agent and proxy Containerfiles then build FROM it (build argument BASE_IMAGE), so hosts
with and without a registry run the same Containerfiles.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.child import reaped
from gateway_bot.sandbox.podman.cli_call import OnLine
from gateway_bot.sandbox.podman.images import LOCAL_BASE
from gateway_bot.sandbox.podman.service import PodmanService

SUITE = "bookworm"
FALLBACK_MIRROR = "http://deb.debian.org/debian"
_URI = re.compile(r"^(?:URIs:|deb(?:\s+\[[^\]]*\])?)\s+(\S+)", re.MULTILINE)


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's Debian archive mirror (not its security or third-party sources)."""
    sources = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for uri in map(str, _URI.findall(text)):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return FALLBACK_MIRROR


async def bootstrap_base(service: PodmanService, on_line: OnLine, *, force: bool = False) -> str:
    """Build and import the base image unless it exists (or ``force``); return its tag."""
    exists = await service.cli("image", "exists", LOCAL_BASE, check=False)
    if exists.returncode == 0 and not force:
        await on_line(f"{LOCAL_BASE} exists (use --force to rebuild it)")
        return LOCAL_BASE
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailable("debootstrap is not installed: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "debootstrap needs root: run `gateway-bot image bootstrap` as root"
        )
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(prefix="gateway-bot-bootstrap-", dir="/var/tmp") as tmp:
        rootfs, tarball = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        await on_line(f"debootstrap {SUITE} from {mirror} (about a minute)")
        await _run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror], on_line)
        # No host resolver inside the image: podman provides /etc/resolv.conf at run time.
        (rootfs / "etc" / "resolv.conf").write_text("")
        await on_line("packing the root file system")
        await _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], on_line)
        await on_line(f"podman import -> {LOCAL_BASE}")
        await service.cli(
            "import", "--change", 'CMD ["/bin/bash"]', str(tarball), LOCAL_BASE, on_line=on_line
        )
    return LOCAL_BASE


async def _run(argv: list[str], on_line: OnLine) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    tail: list[str] = []
    async with reaped(process):
        async for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            tail = [*tail[-4:], line]
            await on_line(line)
        code = await process.wait()
    if code != 0:
        raise SandboxUnavailable(f"{argv[0]} failed: {' / '.join(tail)}")
