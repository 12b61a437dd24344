"""Sandbox settings (the ``sandbox:`` section of the server config).

Everything host-specific is here rather than in code: the podman runtime and ulimits (some
hosts need runc and explicit limits, others not), resource limits, idle and garbage
collection times, and the network the egress proxy uses to reach the outside.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from gateway_bot.config.section import Section

_ULIMIT = re.compile(r"^-?\d+(:-?\d+)?$")
_DEPLOYMENT = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")
_HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")


class PodmanHostSettings(Section):
    """One machine agent containers may run on: its Podman REST service and how many live
    containers it takes."""

    name: str = Field(description="Names the host in messages, logs and status (unique).")
    url: str = Field(
        description=(
            "The host's Podman REST service: unix:///PATH/podman.sock (`podman system "
            "service` on this machine) or ssh://USER@HOST/run/podman/podman.sock."
        ),
    )
    capacity: PositiveInt = Field(
        default=8, description="Live (running) agent containers at most on this host."
    )
    identity: Path | None = Field(
        default=None,
        description=(
            "ssh:// only: the private key the daemon logs in with. Unset: ssh's own choice "
            "(~/.ssh/id_*, an agent)."
        ),
    )
    known_hosts: Path | None = Field(
        default=None,
        description=(
            "ssh:// only: the known_hosts file that must hold the host's key (always checked; "
            "an unknown or changed key makes the host unreachable). Unset: ~/.ssh/known_hosts."
        ),
    )

    shares_state_dir: bool | None = Field(
        default=None,
        description=(
            "Does this host see the daemon's state directory at the same path (the same "
            "machine, or shared storage)? Then a conversation's directories are bind-mounted "
            "as on the local host. If not, they are Podman volumes on that host, reached only "
            "through its Podman API (decision 0130). Unset: true for unix://, false for ssh://."
        ),
    )

    @property
    def shares_state(self) -> bool:
        """``shares_state_dir`` with its default resolved by the URL's scheme."""
        if self.shares_state_dir is not None:
            return self.shares_state_dir
        return self.url.startswith("unix://")

    @field_validator("name")
    @classmethod
    def _is_a_name(cls, value: str) -> str:
        if not _HOST_NAME.match(value):
            raise ValueError("use lower-case letters, digits, '.', '_' or '-' (at most 41)")
        return value

    @field_validator("url")
    @classmethod
    def _is_a_service_url(cls, value: str) -> str:
        if not (value.startswith("unix:///") or value.startswith("ssh://")):
            raise ValueError("a Podman REST URL: unix:///PATH or ssh://USER@HOST/PATH")
        return value

    @model_validator(mode="after")
    def _ssh_settings_for_ssh(self) -> PodmanHostSettings:
        if not self.url.startswith("ssh://") and (self.identity or self.known_hosts):
            raise ValueError("identity and known_hosts are for an ssh:// host")
        return self


class PodmanSettings(Section):
    command: str = Field(default="podman", description="The podman CLI (name or path).")
    socket: Path | None = Field(
        default=None,
        description=(
            "The podman REST service socket. Unset: podman's own default "
            "(/run/podman/podman.sock as root, $XDG_RUNTIME_DIR/podman/podman.sock otherwise). "
            "The daemon starts `podman system service` there when nothing answers."
        ),
    )
    runtime: str | None = Field(
        default="auto",
        description=(
            "OCI runtime for every container and build. 'auto': runc on cgroup-hybrid hosts "
            "(where crun fails), podman's default elsewhere; null: always podman's default."
        ),
    )
    ulimits: dict[str, str] = Field(
        default_factory=lambda: {"nofile": "1024:20000", "nproc": "4096:4096"},
        description=(
            "soft:hard limits set on every container. Podman's defaults can exceed what the "
            "daemon may set (then every container fails to start); {} keeps podman's defaults."
        ),
    )

    hosts: list[PodmanHostSettings] = Field(
        default_factory=list,
        description=(
            "Several Podman hosts: a new conversation goes to the one with the most free "
            "capacity and stays there for its life. Empty: the one local service at `socket` "
            "(the daemon starts it when nothing answers)."
        ),
    )

    @field_validator("hosts")
    @classmethod
    def _names_are_unique(cls, value: list[PodmanHostSettings]) -> list[PodmanHostSettings]:
        names = [host.name for host in value]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        return value

    @field_validator("ulimits")
    @classmethod
    def _limits_are_numbers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, limit in value.items():
            if not _ULIMIT.match(str(limit)):
                raise ValueError(f"{name}: {limit!r} is not SOFT:HARD (e.g. 1024:20000)")
        return value


class ImageSettings(Section):
    base_image: str | None = Field(
        default=None,
        description=(
            "The Containerfile's FROM (build argument BASE_IMAGE). Unset: the local base made "
            "by `gateway-bot image bootstrap` when it exists, else debian:bookworm-slim from a "
            "registry."
        ),
    )
    containerfile: Path | None = Field(
        default=None,
        description=(
            "Default agent Containerfile (unset: the one shipped with gateway-bot). A target "
            "repo's .gateway/Containerfile on its default branch wins over it."
        ),
    )
    max_age_hours: PositiveFloat = Field(
        default=24.0, description="Rebuild an image (without cache) once it is this old."
    )
    repo_containerfiles: Literal["build", "approved", "refuse"] = Field(
        default="build",
        description=(
            "A target repo's .gateway/Containerfile: build it (without network, with few "
            "capabilities, no RUN --mount from=), build only versions whose sha256 is in "
            "approved_containerfiles, or refuse every one (the default image is used)."
        ),
    )
    approved_containerfiles: list[str] = Field(
        default_factory=list,
        description="sha256 hex digests of repo Containerfiles an operator approved.",
    )


class LimitSettings(Section):
    memory: str = Field(default="4g", pattern=r"^\d+[bkmg]?$", description="Per container.")
    pids: PositiveInt = 1024
    cpus: PositiveFloat = 2.0


class EgressAskRule(Section):
    """A request shape the egress proxy holds until someone approves it (see
    ``sandbox/egress/rules.py``: an ask rule opens nothing by itself)."""

    host: str = Field(min_length=1, pattern=r"^[A-Za-z0-9*?.\-\[\]:]+$")
    paths: list[str] = Field(default_factory=list)
    methods: list[str] = Field(default_factory=list)
    ports: list[int] = Field(default_factory=list)

    @field_validator("paths")
    @classmethod
    def _absolute(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.startswith(("/", "*")):
                raise ValueError(f"path {value!r} must start with / or * (a glob)")
        return values

    @field_validator("methods")
    @classmethod
    def _are_methods(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.isalpha():
                raise ValueError(f"{value!r} is not an HTTP method")
        return [value.upper() for value in values]


def _git_push_ask() -> list[EgressAskRule]:
    return [EgressAskRule(host="*", paths=["*/git-receive-pack"], methods=["POST"])]


class EgressApprovalSettings(Section):
    ask: list[EgressAskRule] = Field(
        default_factory=_git_push_ask,
        description=(
            "Requests the egress proxy holds until the daemon approves them (host glob, path "
            "globs, methods, ports). Default: POST to */git-receive-pack, i.e. every git push "
            "over HTTP(S). A repo's .gateway/network-allowlist.yaml may add ask rules, never "
            "remove these. []: nothing is held."
        ),
    )
    timeout_s: PositiveFloat = Field(
        default=600.0,
        description="A held request nobody decides within this many seconds is refused.",
    )


class SandboxSettings(Section):
    kind: Literal["podman", "none"] = Field(
        default="podman",
        description=(
            "'podman': one long-lived container per conversation, network only through the "
            "allowlisting egress proxy. 'none' runs the agent on the host, unconfined (loudly "
            "warned about)."
        ),
    )
    deployment: str | None = Field(
        default=None,
        description=(
            "Names this daemon's containers (label gateway-bot.deployment) so several daemons "
            "can share one podman. Unset: derived from the state directory."
        ),
    )
    podman: PodmanSettings = Field(default_factory=PodmanSettings)
    image: ImageSettings = Field(default_factory=ImageSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    egress_network: str = Field(
        default="podman",
        description="The podman network the egress proxy reaches the outside through.",
    )
    egress_approvals: EgressApprovalSettings = Field(default_factory=EgressApprovalSettings)
    idle_stop_minutes: PositiveFloat = Field(
        default=30.0, description="Stop a conversation's container after this long unused."
    )
    gc_after_days: PositiveFloat = Field(
        default=7.0,
        description="Remove a conversation's container and directories after this long idle.",
    )
    max_live_containers: PositiveInt = Field(
        default=8, description="Running containers at most; the longest idle are stopped first."
    )
    userns_host_uid: PositiveInt | None = Field(
        default=100000,
        description=(
            "Agent containers run in a user namespace: their uids 0-65535 are host uids from "
            "this one on, so container root is not host root (the conversation's directories "
            "are handed to that uid). null: no user namespace (container root is host root)."
        ),
    )

    @field_validator("deployment")
    @classmethod
    def _is_a_name(cls, value: str | None) -> str | None:
        if value is not None and not _DEPLOYMENT.match(value):
            raise ValueError("use lower-case letters, digits, '.', '_' or '-' (at most 41)")
        return value
