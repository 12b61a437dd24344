"""The egress proxy's shared directory on the daemon's side: made before the proxy's first
start, with the host's CA bundle (upstream checks) and mitmproxy's own CA (agents trust it).

Split from ``proxy.py``. Both run under the proxy's ``shared_turn`` (one replica at a time):
two replicas that made the CA into one directory at once left a key of one and a
certificate of the other. The CA is made in ``ca.partial`` and renamed into place when
complete, so a maker killed half-way leaves nothing that passes for a CA.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
from collections.abc import Mapping
from pathlib import Path

from gateway_bot.sandbox.base import SandboxUnavailable
from gateway_bot.sandbox.podman.service import PodmanService

log = logging.getLogger(__name__)

CA_FILES = ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem", "mitmproxy-dhparam.pem")
"""What mitmproxy needs in its confdir to start without writing there."""
_MAKE_CA = "from mitmproxy.certs import CertStore; CertStore.from_store('/ca', 'mitmproxy', 2048)"


def prepare(directory: Path) -> bool:
    """Make the shared directory; copy the host's CA bundle in for upstream checks.
    Returns whether there was one."""
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    bundle = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        return False
    copy = directory / "upstream-ca.pem"
    copy.unlink(missing_ok=True)  # written afresh, never through a link left there
    shutil.copyfile(bundle, copy)
    return True


async def ensure_ca(
    service: PodmanService, labels: Mapping[str, str], directory: Path, image: str
) -> None:
    """mitmproxy's CA in ``directory/ca``, made once by mitmproxy's own code in a one-off
    container that sees only a fresh directory (read-write) and no network. Afterwards the
    proxy gets it read-only: with these files present, mitmproxy 11 writes nothing to its
    confdir."""
    ca, partial = directory / "ca", directory / "ca.partial"
    if await asyncio.to_thread(has_ca, ca):
        return
    log.info("egress proxy: making its CA in %s", ca)
    await asyncio.to_thread(_fresh, partial)
    label_flags = [f for n, v in labels.items() for f in ("--label", f"{n}={v}")]
    result = await service.cli(
        "run", "--rm", *service.cli_limit_flags(), "--network=none", *label_flags,
        "--mount", f"type=bind,source={partial},target=/ca",
        "--entrypoint", "/opt/mitmproxy/bin/python3",
        image, "-c", _MAKE_CA,
        check=False, timeout_s=300,
    )  # fmt: skip
    if result.returncode != 0 or not await asyncio.to_thread(has_ca, partial):
        raise SandboxUnavailable(
            "could not make the egress proxy's CA: "
            + service.explain((result.stdout + result.stderr).strip()[-500:])
        )
    await asyncio.to_thread(_replace, partial, ca)


def has_ca(directory: Path) -> bool:
    return all((directory / name).is_file() for name in CA_FILES)


def _fresh(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def _replace(made: Path, ca: Path) -> None:
    """An incomplete ``ca`` (an older maker's, killed half-way) gives way to the new one."""
    shutil.rmtree(ca, ignore_errors=True)
    made.rename(ca)
