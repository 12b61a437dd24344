"""Attacks, each written as the attack: fixtures shared by the security tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.egress_rig import ProxyRig
from tests.support.sandbox_fixtures import EgressNetwork


@pytest.fixture(scope="session")
def proxy_rig(
    tmp_path_factory: pytest.TempPathFactory,
    egress_network: EgressNetwork,
    podman_socket: Path,
) -> Iterator[ProxyRig]:
    """The real egress proxy, two conversations and real servers behind it, once per session
    (starting it costs seconds): each test sets the routes it needs and ``answer``."""
    rig = ProxyRig(tmp_path_factory.mktemp("egress-rig"), egress_network, podman_socket)
    try:
        rig.start()
        yield rig
    finally:
        rig.close()
