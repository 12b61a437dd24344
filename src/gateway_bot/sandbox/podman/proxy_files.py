"""The egress proxy's shared directory, made before its first start: the sub-directories, the
host's CA bundle for checking upstream servers, and mitmproxy's own CA."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
from pathlib import Path

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman.service import PodmanService

log = logging.getLogger(__name__)

CA_FILES = ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem", "mitmproxy-dhparam.pem")
"""What mitmproxy needs in its confdir to start without writing there."""
_MAKE_CA = "from mitmproxy.certs import CertStore; CertStore.from_store('/ca', 'mitmproxy', 2048)"
_LABEL_DEPLOYMENT = "gateway-bot.deployment"
_LABEL_ROLE = "gateway-bot.role"


def prepare_directory(directory: Path) -> bool:
    """Make the shared directory; copy the host's CA bundle in for upstream checks.
    Returns whether there was one."""
    for sub in ("ca", "logs"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    bundle = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        return False
    copy = directory / "upstream-ca.pem"
    copy.unlink(missing_ok=True)  # written afresh, never through a link left there
    shutil.copyfile(bundle, copy)
    return True


async def ensure_ca(service: PodmanService, deployment: str, ca: Path, image: str) -> None:
    """mitmproxy's CA, made once by mitmproxy's own code in a one-off container that sees
    only the CA directory (read-write) and no network. Afterwards the proxy gets that
    directory read-only: with these files present, mitmproxy 11 writes nothing to its
    confdir."""
    if await asyncio.to_thread(has_ca, ca):
        return
    log.info("egress proxy: making its CA in %s", ca)
    result = await service.cli(
        "run", "--rm", *service.cli_limit_flags(), "--network=none",
        "--label", f"{_LABEL_DEPLOYMENT}={deployment}",
        "--label", f"{_LABEL_ROLE}=proxy",
        "--mount", f"type=bind,source={ca},target=/ca",
        "--entrypoint", "/opt/mitmproxy/bin/python3",
        image, "-c", _MAKE_CA,
        check=False, timeout_s=300,
    )  # fmt: skip
    if result.returncode != 0 or not await asyncio.to_thread(has_ca, ca):
        raise SandboxUnavailable(
            "could not make the egress proxy's CA: "
            f"{(result.stdout + result.stderr).strip()[-500:]}"
        )


def has_ca(directory: Path) -> bool:
    return all((directory / name).is_file() for name in CA_FILES)
