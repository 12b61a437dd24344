"""A context's container around one task: before it, made or repaired (created on the
first task, recreated when its image or user namespace setting changed or it died in its
last task, started when stopped); after it, checked (still running: its stray processes
end; gone: the task failed and the next one gets a fresh container).

Split from ``sandbox.py``, which decides when these run (under the context's lock) and
starts the task's exec in between.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from podman.errors import PodmanError

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.base import ExecutionContext, SandboxUnavailable
from gateway_bot.sandbox.podman import containers as spec
from gateway_bot.sandbox.podman import strays
from gateway_bot.sandbox.podman.hosts import PodmanHost
from gateway_bot.sandbox.podman.idle_stops import ContextState, KnownContainer
from gateway_bot.sandbox.podman.images import BuiltImage
from gateway_bot.sandbox.podman.init_volume import ensure_init_volume, put_ca
from gateway_bot.sandbox.podman.proxy import LABEL_DEPLOYMENT
from gateway_bot.sandbox.podman.volumes import ensure_volumes

log = logging.getLogger(__name__)


async def ensure_container(
    host: PodmanHost,
    context: ExecutionContext,
    state: ContextState,
    image: BuiltImage,
    network: spec.ContextNetwork,
    deployment: str,
    settings: SandboxSettings,
) -> bool:
    """The context's container runs on ``image``; True when it was (re)started here (the
    caller then enforces the host's cap).

    Without a call to podman when the state learned moments ago still holds
    (``ContextState.known``: the start-up listing, or the last task's inspect): the
    container's init, the very process podman named, still runs (a container removed,
    stopped, restarted or recreated behind the daemon's back has another init or none),
    and the image is the one this task needs. Otherwise podman is asked, as always."""
    name = spec.container_name(context.id)
    in_volumes = not host.shares_state_dir
    known = state.known
    if (
        known is not None
        and not state.broken
        and known.image_id == image.id
        and strays.still_running(known.init)
    ):
        return False
    state.known = None
    info = await host.calls.inspect(name)
    if info is not None:
        owner = info["Config"]["Labels"].get(LABEL_DEPLOYMENT)
        if owner != deployment:
            raise SandboxUnavailable(
                f"a container named {name} exists but belongs to deployment {owner!r}, "
                f"not {deployment!r}; remove it or set sandbox.deployment"
            )
        reason = (
            "its image changed" if info["Image"] != image.id
            else "it stopped during its last task" if state.broken
            else "its init is not the host's read-only one"
            if not spec.made_with_init(info, in_volumes)
            else "its user namespace setting changed"
            if not spec.userns_matches(info, settings.userns_host_uid)
            else None
        )  # fmt: skip
        if reason:
            log.info("recreating container %s: %s (mounts are kept)", name, reason)
            await host.calls.remove(name)
            info = None
    state.broken = False
    if info is None:
        init_volume = None
        if in_volumes:
            await ensure_volumes(host.service, deployment, context.id)
            init_volume = await ensure_init_volume(host.service, deployment, image.tag)
        create = spec.create_spec(
            context, image.tag, network, deployment, host.proxy.ca_certificate,
            settings.limits, host.service, init_volume=init_volume,
        )  # fmt: skip
        uid = settings.userns_host_uid
        if uid is not None and not in_volumes:
            mounted = [context.workspace, context.home, context.inbox, context.outbox]
            await spec.hand_over([*mounted, context.storage], uid)
        await host.calls.call(lambda c: spec.create_container(c, create, uid), f"create {name}")
        if in_volumes:
            await put_ca(host.service, name, host.proxy.ca_certificate)
        log.info("created container %s on %s (host %s)", name, image.tag, host.name)
    if info is None or not info["State"]["Running"]:
        await host.calls.start(name)
        await host.calls.exec_quietly(name, spec.TRUST_CA)
        return True  # its init is learned after the task (``after_exit``'s inspect)
    learn(host, state, info, settings.userns_host_uid)
    return False


def learn(
    host: PodmanHost, state: ContextState, info: dict[str, Any], userns_host_uid: int | None
) -> None:
    """Remember a running container as podman described it (an inspect, or an entry of its
    listing), for the next task's ``ensure_container`` and ``after_exit``: only on this
    machine (its init is in this /proc), and only when its init shows there what
    ``ensure_container`` would otherwise check (``containers.init_as_created``)."""
    in_volumes = not host.shares_state_dir
    state.known = known_from(info, userns_host_uid, in_volumes) if host.service.is_local else None


def known_from(
    info: dict[str, Any], userns_host_uid: int | None, in_volumes: bool = False
) -> KnownContainer | None:
    """``learn``'s check, a few reads of /proc (blocking, milliseconds)."""
    inspected = info.get("State")
    if isinstance(inspected, dict):  # an inspect
        pid, image_id = inspected.get("Pid"), info.get("Image")
        made_so = spec.made_with_init(info, in_volumes)
    else:  # a listing's entry
        pid, image_id = info.get("Pid"), info.get("ImageID")
        # The listing has no entrypoint: a container made with init as its entrypoint has
        # no command; one with a command is older (and the inspect's path decides).
        made_so = not info.get("Command")
    # podman's record of the command first: /proc/PID/cmdline is init's own memory, which
    # a process that is not this init (an image's ENTRYPOINT, a catatonit taken over
    # before the upgrade) can rewrite to read as INIT_COMMAND.
    if not pid or not image_id or not made_so:
        return None
    identity = strays.init_identity(int(pid))
    if identity is None or not spec.init_as_created(identity.pid, userns_host_uid, in_volumes):
        return None
    if not strays.still_running(identity):  # the PID no longer names the process checked
        return None
    return KnownContainer(str(image_id), identity)


async def after_exit(
    host: PodmanHost,
    context_id: str,
    state: ContextState,
    code: int,
    killed: bool,
    userns_host_uid: int | None = None,
) -> str:
    """After the task's exec ended: what to add to its reply ("" for nothing)."""
    state.last_used = time.monotonic()
    name = spec.container_name(context_id)
    known = state.known
    if known is not None and strays.still_running(known.init):
        # Its init still runs, so the container does: what the task left ends, found from
        # the host's /proc (no inspect; ``kill_all_but_init`` checks the init again).
        await host.calls.kill_strays_of_init(name, known.init.pid)
        state.busy = False
        return ""
    try:
        info = await host.calls.inspect(name)
    except (PodmanError, OSError) as exc:  # the host went away during the task
        state.busy = False
        state.unswept = True  # the agent may still run: the next task clears it first
        return f"sandbox: the agent's host {host.name} stopped answering ({exc})"
    running = info is not None and info["State"]["Running"]
    if running:
        assert info is not None
        # After every task, not only a killed one: whatever the agent started in the
        # background (a server, a loop flipping files in the outbox) ends with it. From
        # the host (a scan of /proc, milliseconds), before the reply goes out.
        await host.calls.kill_strays(name, info)
        learn(host, state, info, userns_host_uid)
    else:
        state.known = None
    state.busy = False
    if code != 0 and not running:
        state.broken = True
        return (
            f"sandbox: the container {name} stopped while the task ran (exit {code}); "
            "the next message gets a fresh container with the same workspace."
        )
    return ""
