"""One execution context's network and container: names, labels, mounts, limits.

Container ``gwb-<context>`` is alone on network ``gwb-net-<context>`` (internal, no DNS, so
no route anywhere) with the egress proxy at .2 and itself at .3. Its PID 1 is a small shell
loop that only sleeps and reaps; every task is an exec into it. Mounted: the context's
workspace, home, inbox, outbox and storage, and the proxy's CA certificate. Nothing else
from the host; environment variables come with each exec.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podman.errors import NotFound

from gateway_bot.config.sandbox import LimitSettings
from gateway_bot.sandbox.base import ExecutionContext, SandboxPaths
from gateway_bot.sandbox.host_commands import run_quietly
from gateway_bot.sandbox.podman.proxy import (
    LABEL_CONTEXT,
    LABEL_DEPLOYMENT,
    LABEL_ROLE,
    PROXY_PORT,
)
from gateway_bot.sandbox.podman.service import INIT_ON_HOST, PodmanService

log = logging.getLogger(__name__)

PATHS = SandboxPaths(
    workspace="/workspace", home="/home/agent", inbox="/inbox", outbox="/outbox", storage="/storage"
)
CA_IN_CONTAINER = "/usr/local/share/ca-certificates/gateway-bot-proxy.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

INIT_IN_CONTAINER = "/run/gateway-bot-init"
INIT_COMMAND = [INIT_IN_CONTAINER]
"""PID 1: gateway-bot's own init (``init.c``), mounted read-only from the host. It starts
nothing, reaps orphans, exits on SIGTERM and is not dumpable: the agent, root in there with
init's own capabilities, took over podman's catatonit with ptrace and kept a program of its
own running as PID 1, which no sweep ends. A container whose init has other arguments
(catatonit's ``-P``) is recreated. Nothing of the image runs as init or as a child of it:
the agent is root in there and can replace any file of the image, and a child of init is
one a stray sweep would have to spare (it used to be a shell loop starting the image's
``sleep``, which the agent replaced to keep a program of its own alive through every
sweep). Stray processes are ended from the host (``strays.py``)."""

INIT_VOLUME_DIR = "/run/gateway-bot"
INIT_IN_VOLUME = f"{INIT_VOLUME_DIR}/init"
"""PID 1 on a host that does not share the daemon's disk: the same init, from a read-only
volume of that host (``init_volume.py``) mounted here (a volume is a directory)."""


def init_command(in_volumes: bool) -> list[str]:
    """PID 1's argv: the init mounted from the host, or from the host's init volume."""
    return [INIT_IN_VOLUME] if in_volumes else INIT_COMMAND


NETWORK_SYSCTLS = {
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
    "net.ipv6.conf.lo.disable_ipv6": "1",
    "net.ipv4.ping_group_range": "1 0",
}
"""The internal network has no IPv4 route out, but its bridge keeps an IPv6 link-local
address through which host services listening on ``[::]`` answer: no IPv6 in the agent's
network namespace at all, and no unprivileged ICMP sockets."""

USERNS_SIZE = 65536


def userns_matches(info: dict[str, Any], userns_host_uid: int | None) -> bool:
    """Does an existing container have the user namespace the settings ask for?"""
    mappings = (info.get("HostConfig") or {}).get("IDMappings") or {}
    wanted = [f"0:{userns_host_uid}:{USERNS_SIZE}"] if userns_host_uid is not None else []
    return list(mappings.get("UidMap") or []) == wanted


def made_with_init(info: dict[str, Any], in_volumes: bool = False) -> bool:
    """Was an existing container made with ``INIT_COMMAND`` (``INIT_IN_VOLUME`` on a host
    that does not share the state directory) as its PID 1? podman's inspect gives the
    command as ``Path`` and ``Args``: the rest of it, or all of it when it has no arguments
    (podman 4.3). A container made for the other kind of host is recreated (its directories
    are mounted the other way too)."""
    command = init_command(in_volumes)
    args = list(info.get("Args") or [])
    return info.get("Path") == command[0] and args in (command[1:], command)


def init_as_created(pid: int, userns_host_uid: int | None, in_volumes: bool = False) -> bool:
    """Does the running process ``pid`` (a container's init) show, in the host's /proc,
    what ``ensure_container`` checks in an inspect: ``INIT_COMMAND`` as its argv (the
    host's read-only init, not an image's program) and the user namespace the
    settings ask for. False when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")[:-1]
        if argv != [arg.encode() for arg in init_command(in_volumes)]:
            return False
        if userns_host_uid is None:
            return os.readlink(f"/proc/{pid}/ns/user") == os.readlink("/proc/self/ns/user")
        with open(f"/proc/{pid}/uid_map", encoding="ascii") as uid_map:
            mapping = [line.split() for line in uid_map.read().splitlines()]
        return mapping == [["0", str(userns_host_uid), str(USERNS_SIZE)]]
    except (OSError, ValueError):
        return False


async def hand_over(directories: Sequence[Path], uid: int) -> None:
    """Make ``directories`` (recursively, never following a link) belong to ``uid``: the
    container's root in its user namespace. Only called while no container of the context
    exists, so nothing in there can change under the walk. GNU chown walks iteratively
    (a tree thousands of levels deep is no problem) and, with ``-P -h``, changes links
    themselves, never what they point at."""
    stale = [str(p) for p in directories if p.exists() and p.lstat().st_uid != uid]
    if not stale:
        return
    code, stderr = await run_quietly("chown", "-R", "-P", "-h", f"{uid}:{uid}", "--", *stale)
    if code != 0:
        log.warning("chown of %s: %s", ", ".join(stale), stderr[-500:])


_TRUST_CA_SCRIPT = (
    f'ca={CA_IN_CONTAINER}; b={SYSTEM_BUNDLE}; [ -s "$ca" ] || exit 0; '
    # The certificate's first line of base64 already in the bundle: added at an earlier start.
    'grep -qF "$(sed -n 2p "$ca")" "$b" 2>/dev/null || cat "$ca" >> "$b"; '
    'ln -sfn "$ca" /etc/ssl/certs/gateway-bot-proxy.pem; '
    'h=$(openssl x509 -hash -noout -in "$ca" 2>/dev/null) && '
    'ln -sfn gateway-bot-proxy.pem "/etc/ssl/certs/$h.0"; true'
)
TRUST_CA = ["sh", "-c", _TRUST_CA_SCRIPT]
"""Run in the container at each start: the proxy's CA joins the system bundle (what curl,
git, pip and Python read) and the hashed directory (OpenSSL's CApath), as
``update-ca-certificates`` would leave them, in about 0.1 s instead of its 0.8 s (it rebuilds
the whole bundle and every hash link: most of a new conversation's first turn, issue 33).
An ``update-ca-certificates`` the agent runs later keeps it (the CA is mounted where that
tool looks)."""


@dataclass(frozen=True)
class ContextNetwork:
    name: str
    proxy_address: str
    agent_address: str


def container_name(context_id: str) -> str:
    return f"gwb-{context_id}"


def network_name(context_id: str) -> str:
    return f"gwb-net-{context_id}"


def labels(deployment: str, context_id: str, role: str = "agent") -> dict[str, str]:
    return {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role, LABEL_CONTEXT: context_id}


async def ensure_network(
    service: PodmanService, deployment: str, context_id: str
) -> ContextNetwork:
    """The context's internal network (made on first use) and the two fixed addresses in it."""
    name = network_name(context_id)

    def call(client: Any) -> dict[str, Any]:
        try:
            return dict(client.networks.get(name).attrs)
        except NotFound:
            created = client.networks.create(
                name,
                internal=True,
                dns_enabled=False,
                labels=labels(deployment, context_id, "network"),
            )
            return dict(created.attrs)

    return network_of(name, await service.api(call))


def network_of(name: str, attrs: dict[str, Any]) -> ContextNetwork:
    """A context network's two fixed addresses, from podman's description of it."""
    subnet = ipaddress.ip_network(attrs["subnets"][0]["subnet"])
    return ContextNetwork(name, str(subnet[2]), str(subnet[3]))


def agent_env() -> dict[str, str]:
    """Fixed environment of every agent container: the proxy, and trust in its CA."""
    proxy = f"http://proxy:{PROXY_PORT}"
    return {
        "HOME": PATHS.home,
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "localhost,127.0.0.1",
        "no_proxy": "localhost,127.0.0.1",
        "NODE_EXTRA_CA_CERTS": CA_IN_CONTAINER,
        "REQUESTS_CA_BUNDLE": SYSTEM_BUNDLE,
        "PIP_CERT": SYSTEM_BUNDLE,
    }


DIRECTORIES = ("workspace", "home", "inbox", "outbox", "storage")
"""A context's own directories: bind mounts of the daemon's, or a host's named volumes."""


def volume_name(context_id: str, directory: str) -> str:
    """The named volume holding ``directory`` of a context on a host that does not share
    the daemon's state directory (decision 0130)."""
    return f"gwb-{context_id}-{directory}"


def context_volumes(context_id: str) -> dict[str, str]:
    """Volume name -> where it is mounted in the container, for the context's directories."""
    return {volume_name(context_id, d): getattr(PATHS, d) for d in DIRECTORIES}


def create_spec(
    context: ExecutionContext,
    image: str,
    network: ContextNetwork,
    deployment: str,
    ca_certificate: Path,
    limits: LimitSettings,
    service: PodmanService,
    *,
    init_volume: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for podman-py's ``containers.create``. With ``init_volume`` (a host
    that does not share the state directory) the context's directories are the host's named
    volumes (``context_volumes``, made first by the caller), ``nosuid,nodev`` as the bind
    mounts are, and init comes from that read-only volume; otherwise the daemon's
    directories and the host's init, bind-mounted."""
    in_volumes = init_volume is not None
    mounts: list[Mapping[str, Any]] = []
    volumes: dict[str, dict[str, Any]] = {}
    if init_volume is not None:
        volumes = {
            name: {"bind": target, "extended_mode": ["nosuid", "nodev"]}
            for name, target in context_volumes(context.id).items()
        }
        volumes[init_volume] = {"bind": INIT_VOLUME_DIR, "extended_mode": ["ro", "nodev"]}
    else:  # on a host without our disk the CA is put in after the create (``put_ca``)
        mounts.append({**_bind(ca_certificate, CA_IN_CONTAINER), "read_only": True})
        mounts.append({**_bind(INIT_ON_HOST, INIT_IN_CONTAINER), "read_only": True})
        mounts[:0] = [
            _bind(context.workspace, PATHS.workspace),
            _bind(context.home, PATHS.home),
            _bind(context.inbox, PATHS.inbox),
            _bind(context.outbox, PATHS.outbox),
            _bind(context.storage, PATHS.storage),
        ]
    return {
        "image": image,
        "name": container_name(context.id),
        # As the entrypoint, not the command: podman puts the command after an image's
        # ENTRYPOINT, and a repo's Containerfile may set one, which then ran as PID 1 (with
        # this init as its argument), spared by every sweep. Nor the image's stop signal:
        # init ends on SIGTERM only.
        "entrypoint": init_command(in_volumes),
        "command": [],
        "stop_signal": int(signal.SIGTERM),  # podman's API takes the number
        "labels": labels(deployment, context.id),
        "hostname": container_name(context.id),
        "working_dir": PATHS.workspace,
        "environment": agent_env(),
        "mounts": mounts,
        **({"volumes": volumes} if volumes else {}),
        "networks": {network.name: {"static_ips": [network.agent_address]}},
        "dns": ["127.0.0.1"],  # no resolver: names outside /etc/hosts do not resolve
        "extra_hosts": {"proxy": network.proxy_address},
        "sysctls": NETWORK_SYSCTLS,
        "runtime": service.runtime,
        "ulimits": service.api_ulimits(),
        "mem_limit": limits.memory,
        "pids_limit": limits.pids,
        "nano_cpus": int(limits.cpus * 1_000_000_000),
        "stop_timeout": 5,
    }


def _bind(source: Path, target: str) -> dict[str, Any]:
    return {"type": "bind", "source": str(source), "target": target}


def create_container(client: Any, create: dict[str, Any], userns_host_uid: int | None) -> None:
    """``containers.create`` with every bind mount ``nosuid,nodev`` (what the agent leaves in
    its directories lands on the host's filesystem, where a setuid-root binary or a device
    node made by container root must never take effect) and, with ``userns_host_uid``, in a
    user namespace mapping container uids/gids 0-65535 to host ids from that one on.
    podman-py has no key for either, so its own payload rendering is used and both added
    before the POST (the same request ``containers.create`` makes)."""
    payload = client.containers._render_payload(dict(create))
    if userns_host_uid is not None:
        mapping = [{"container_id": 0, "host_id": userns_host_uid, "size": USERNS_SIZE}]
        payload["idmappings"] = {
            "HostUIDMapping": False,
            "HostGIDMapping": False,
            "UIDMap": mapping,
            "GIDMap": mapping,
        }
        payload["userns"] = {"nsmode": "private"}
    for mount in payload.get("mounts") or []:
        if mount.get("type") == "bind":
            options = list(mount.get("options") or [])
            mount["options"] = options + [o for o in ("nosuid", "nodev") if o not in options]
    response = client.api.post(
        "/containers/create",
        headers={"content-type": "application/json"},
        data=json.dumps(payload),
    )
    response.raise_for_status()
