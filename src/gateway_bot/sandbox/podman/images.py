"""The agent and proxy images: tagged by a hash of what goes into them, built when missing.

A tag is ``localhost/gateway-bot/<name>:<hash>`` where the hash covers the Containerfile's
text, the base image (name and id) and the build-context files. Change any of them and the
next task finds no image under the new tag, builds it, and (``PodmanSandbox``) recreates the
container on it with the same mounts. An image older than ``image.max_age_hours`` is rebuilt
without the layer cache, so security updates in its RUN steps land at least daily.

The Containerfile's FROM is the build argument ``BASE_IMAGE``: the registry's Debian where a
registry is reachable, or the local base ``gateway-bot image bootstrap`` makes with
debootstrap where none is. Both paths build the same Containerfile.

The agent's files (the agent backend's, given by the daemon as name -> host path) are in the
agent image's build context twice, as hard links: by name at the top (``COPY claude ...``
in a repo's Containerfile) and in ``agent-bin/``, which the default Containerfile copies
onto the PATH whatever the backend is.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import os
import shutil
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podman.errors import APIError, ImageNotFound

from gateway_bot.config.sandbox import ImageSettings, LimitSettings
from gateway_bot.sandbox.base import REPO_CONTAINERFILE_PATH, SandboxUnavailable
from gateway_bot.sandbox.podman.cli_call import OnLine
from gateway_bot.sandbox.podman.repo_containerfile import (
    RepoContainerfileRefused,
    check_repo_containerfile,
)
from gateway_bot.sandbox.podman.service import PodmanService

log = logging.getLogger(__name__)

LOCAL_BASE = "localhost/gateway-bot/base:bookworm"
REGISTRY_BASE = "docker.io/library/debian:bookworm-slim"
AGENT_IMAGE = "localhost/gateway-bot/agent"
PROXY_IMAGE = "localhost/gateway-bot/proxy"
_OURS = (AGENT_IMAGE + ":", PROXY_IMAGE + ":")
_HASH = "gateway-bot.content-hash"

_PROJECT_ROOT = Path(__file__).resolve().parents[4]
DEFAULT_CONTAINERFILE = _PROJECT_ROOT / "Containerfile"
PROXY_CONTEXT = _PROJECT_ROOT / "images" / "proxy"
_EGRESS_PACKAGE = Path(__file__).resolve().parents[1] / "egress"
_PROXY_MODULES = ("__init__.py", "rules.py", "target.py", "git_push.py")
"""What the proxy imports of sandbox/egress (standard library and yarl only)."""
UNTRUSTED_BUILD_FLAGS = [
    "--network=none",
    "--cap-drop=all",
    "--cap-add=CHOWN,DAC_OVERRIDE,FOWNER,FSETID,SETUID,SETGID",
]
"""A repo's own Containerfile: no network in its RUN steps (neither the host's nor the
internet: it never passes the egress proxy), and only the capabilities package installs
need. (A user namespace for the build is not used: buildah 1.28 does not remap the base
image's layers, so its root could not write its own filesystem.)"""


def untrusted_build_limits(limits: LimitSettings) -> list[str]:
    """A repo's build steps run as the host's root, in the build's cgroup: without these
    they had all of the host's memory and CPUs (``RUN`` a program that allocates until the
    kernel kills something, the daemon perhaps). They get what an agent container gets."""
    period = 100_000
    return [
        f"--memory={limits.memory}",
        f"--cpu-period={period}",
        f"--cpu-quota={max(1000, int(limits.cpus * period))}",
    ]


_UNHASHED = {"host-ca.pem"}
AGENT_BIN = "agent-bin"
"""The build-context directory holding the agent's files (always there, maybe empty)."""
"""Context files that do not make a new image: the host's CA bundle only helps pip fetch."""


RECHECK_S = 60.0
"""How long a checked image is taken as current without asking podman again: the check is
four podman calls and a hash of the build context, which every task made (twice, with the
proxy's) before its exec; a changed Containerfile is a new key and checked at once."""


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    id: str


async def _log_line(line: str) -> None:
    log.info("image build: %s", line)


class ImageBuilder:
    def __init__(
        self,
        service: PodmanService,
        settings: ImageSettings,
        agent_files: Mapping[str, Path],
        work_dir: Path,
        *,
        refresh_in_background: bool = False,
        limits: LimitSettings | None = None,
    ) -> None:
        """``agent_files`` go into the agent image's build context by name and under
        ``agent-bin/`` (the default Containerfile puts that on the image's PATH). With
        ``refresh_in_background`` (the daemon) an image past its age is still used while its
        rebuild runs, so no task waits for it; the next task after it gets the new one.
        ``limits``: an agent container's memory and CPUs, which a repo's build gets too."""
        self._service = service
        self._settings = settings
        self._limits = limits or LimitSettings()
        self._agent_files = {
            **agent_files,
            **{f"{AGENT_BIN}/{name}": path for name, path in agent_files.items()},
        }
        self._work_dir = work_dir
        self._locks: dict[str, asyncio.Lock] = {}
        self._refresh_in_background = refresh_in_background
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._checked: dict[tuple[str, str, bool], tuple[BuiltImage, float]] = {}

    async def base_image(self) -> str:
        if self._settings.base_image:
            return self._settings.base_image
        return LOCAL_BASE if await self.inspect(LOCAL_BASE) else REGISTRY_BASE

    def default_containerfile(self) -> str:
        return (self._settings.containerfile or DEFAULT_CONTAINERFILE).read_text()

    async def agent_image(
        self, containerfile: str | None = None, on_line: OnLine | None = None
    ) -> BuiltImage:
        """The image for ``containerfile`` (a repo's own; None: the default), built if needed.

        A repo's Containerfile is hostile input: it is checked (``repo_containerfile``),
        subject to the operator's ``repo_containerfiles`` policy, and built without network
        and with few capabilities. Raises SandboxUnavailable saying why it was refused."""
        if containerfile is None or self._settings.repo_containerfiles == "refuse":
            if containerfile is not None:
                log.warning("ignoring the repo's Containerfile (repo_containerfiles: refuse)")
            text = self.default_containerfile()
            return await self._ensure(AGENT_IMAGE, text, self._agent_files, on_line)
        digest = hashlib.sha256(containerfile.encode()).hexdigest()
        if (
            self._settings.repo_containerfiles == "approved"
            and digest not in self._settings.approved_containerfiles
        ):
            raise SandboxUnavailable(
                f"the repo's {REPO_CONTAINERFILE_PATH} (sha256 {digest}) is not approved for "
                "building on this host. An operator who has read it adds that hash to "
                "sandbox.image.approved_containerfiles."
            )
        try:
            check_repo_containerfile(containerfile)
        except RepoContainerfileRefused as exc:
            raise SandboxUnavailable(
                f"the repo's {REPO_CONTAINERFILE_PATH} was refused: " + "; ".join(exc.problems)
            ) from exc
        return await self._ensure(
            AGENT_IMAGE, containerfile, self._agent_files, on_line, untrusted=True
        )

    async def proxy_image(self, on_line: OnLine | None = None) -> BuiltImage:
        text, files = await asyncio.to_thread(_proxy_context)
        return await self._ensure(PROXY_IMAGE, text, files, on_line)

    async def inspect(self, tag: str) -> dict[str, Any] | None:
        def get(client: Any) -> dict[str, Any] | None:
            try:
                return dict(client.images.get(tag).attrs)
            except ImageNotFound:
                return None

        return await self._service.api(get)

    async def _ensure(
        self,
        repository: str,
        containerfile: str,
        files: Mapping[str, Path],
        on_line: OnLine | None,
        *,
        untrusted: bool = False,
    ) -> BuiltImage:
        key = (repository, containerfile, untrusted)
        checked = self._checked.get(key)
        if on_line is None and checked and time.monotonic() - checked[1] < RECHECK_S:
            return checked[0]
        image = await self._check(repository, containerfile, files, on_line, untrusted)
        self._checked[key] = (image, time.monotonic())
        return image

    async def _check(
        self,
        repository: str,
        containerfile: str,
        files: Mapping[str, Path],
        on_line: OnLine | None,
        untrusted: bool,
    ) -> BuiltImage:
        base = await self.base_image()
        base_info = await self.inspect(base)
        digest = _content_hash(containerfile, base, base_info, files)
        tag = f"{repository}:{digest[:16]}"
        async with self._locks.setdefault(tag, asyncio.Lock()):
            info = await self.inspect(tag)
            stale = info is not None and _age_hours(info) > self._settings.max_age_hours
            if info is not None and not stale:
                if on_line is not None:
                    await on_line(f"{tag} is up to date")
                return BuiltImage(tag, str(info["Id"]))
            if info is not None and self._refresh_in_background:
                if tag not in self._refreshing:
                    log.info("refreshing %s in the background (older than the maximum age)", tag)
                    refresh = self._build(
                        tag, digest, containerfile, base, files, None, no_cache=True,
                        untrusted=untrusted,
                    )  # fmt: skip
                    job = asyncio.create_task(refresh)
                    self._refreshing[tag] = job
                    job.add_done_callback(lambda done: self._refreshed(tag, done))
                return BuiltImage(tag, str(info["Id"]))
            why = "older than the maximum age" if stale else "not built yet"
            log.info("building %s (%s)", tag, why)
            await self._build(
                tag, digest, containerfile, base, files, on_line, no_cache=stale,
                untrusted=untrusted,
            )  # fmt: skip
            built = await self.inspect(tag)
            assert built is not None, f"{tag} missing right after its build"
            return BuiltImage(tag, str(built["Id"]))

    async def prune(self) -> list[str]:
        """Remove our images that no container uses and that are past the maximum age
        (superseded tags, old ids a rebuild left untagged). Returns what went."""

        def call(client: Any) -> list[str]:
            removed = []
            for image in client.images.list(all=True):
                all_tags = image.attrs.get("RepoTags") or []
                tags = [t for t in all_tags if t.startswith(_OURS)]
                labels = image.attrs.get("Labels") or {}
                ours = bool(tags) or (not all_tags and _HASH in labels)
                if not ours or _age_hours(image.attrs) <= self._settings.max_age_hours:
                    continue
                try:
                    client.images.remove(image.id)  # refused while a container uses it
                except (APIError, ImageNotFound):
                    continue
                removed.append(", ".join(tags) or image.id[:12])
            return removed

        removed = await self._service.api(call)
        if removed:
            self._checked.clear()
        return removed

    async def close(self) -> None:
        """Abandon background refreshes (the next start finds the image still old)."""
        jobs = list(self._refreshing.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

    def _refreshed(self, tag: str, job: asyncio.Task[None]) -> None:
        self._refreshing.pop(tag, None)
        self._checked.clear()  # the next task asks podman again: it gets the new image
        if not job.cancelled() and job.exception() is not None:
            log.warning("refreshing %s failed, keeping the old image: %s", tag, job.exception())

    async def _build(
        self,
        tag: str,
        digest: str,
        containerfile: str,
        base: str,
        files: Mapping[str, Path],
        on_line: OnLine | None,
        *,
        no_cache: bool,
        untrusted: bool = False,
    ) -> None:
        context = self._work_dir / "build" / digest[:16]
        await asyncio.to_thread(_stage_context, context, containerfile, files)
        args = ["build", *self._service.cli_limit_flags(), "--build-arg", f"BASE_IMAGE={base}"]
        if untrusted:
            args += [*UNTRUSTED_BUILD_FLAGS, *untrusted_build_limits(self._limits)]
        for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
            if os.environ.get(name):
                args += ["--build-arg", f"{name}={os.environ[name]}"]
        if no_cache:
            args.append("--no-cache")
        args += ["--label", f"{_HASH}={digest}", "-t", tag]
        args += ["-f", str(context / "Containerfile"), str(context)]
        try:
            await self._service.cli(*args, on_line=on_line or _log_line, timeout_s=1800)
        finally:
            await asyncio.to_thread(shutil.rmtree, context, True)


def _proxy_context() -> tuple[str, dict[str, Path]]:
    """The proxy's Containerfile and context: its addon, the daemon's egress package as
    ``gwb_egress`` (how requests are read and judged, how a push is read), and the host's CA
    bundle for pip (an empty file when the host has none)."""
    files = {
        path.name: path
        for path in PROXY_CONTEXT.iterdir()
        if path.is_file() and path.name != "Containerfile"
    }
    for name in _PROXY_MODULES:
        files[f"gwb_egress/{name}"] = _EGRESS_PACKAGE / name
    ca_bundle = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    files["host-ca.pem"] = ca_bundle if ca_bundle.is_file() else Path(os.devnull)
    return (PROXY_CONTEXT / "Containerfile").read_text(), files


def _content_hash(
    containerfile: str, base: str, base_info: dict[str, Any] | None, files: Mapping[str, Path]
) -> str:
    digest = hashlib.sha256()
    digest.update(containerfile.encode())
    digest.update(f"\0{base}\0{(base_info or {}).get('Id', '')}".encode())
    for name in sorted(files):
        if name in _UNHASHED:
            continue
        path = files[name]
        stat = path.stat()
        if stat.st_size < 1024 * 1024:
            identity = hashlib.sha256(path.read_bytes()).hexdigest()
        else:  # the 245 MB agent binary: its size and mtime say when it changed
            identity = f"{stat.st_size}:{stat.st_mtime_ns}"
        digest.update(f"\0{name}\0{identity}".encode())
    return digest.hexdigest()


def _age_hours(info: dict[str, Any]) -> float:
    created = info.get("Created")
    if isinstance(created, int | float):
        stamp = float(created)
    else:
        text = str(created).replace("Z", "+00:00")
        if "." in text:  # Go prints nanoseconds; Python parses microseconds at most
            head, _, rest = text.partition(".")
            digits = "".join(ch for ch in rest if ch.isdigit())
            zone = rest[len(digits) :]
            text = f"{head}.{digits[:6]}{zone}"
        stamp = datetime.datetime.fromisoformat(text).timestamp()
    return (time.time() - stamp) / 3600


def _stage_context(context: Path, containerfile: str, files: Mapping[str, Path]) -> None:
    shutil.rmtree(context, ignore_errors=True)
    (context / AGENT_BIN).mkdir(parents=True)
    (context / "Containerfile").write_text(containerfile)
    staged: dict[Path, Path] = {}
    for name, source in files.items():
        target = context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source == Path(os.devnull):
            target.write_bytes(b"")
            continue
        if source in staged:  # the same file under a second name: a link, never a copy
            os.link(staged[source], target)
            continue
        try:
            os.link(source, target)  # the agent binary is big: no copy when one filesystem
        except OSError:
            shutil.copy2(source, target)
        staged[source] = target
