"""A second machine for Podman, reached over SSH, that shares no disk with the daemon.

Debian's sshd listens on 127.0.0.1 on a free port, with a host key and a client key made
for this run. It runs in a mount namespace of its own (``unshare --mount --propagation
private``) in which a tmpfs covers the host's directory: the Podman REST service started
there keeps its storage, run root and socket on that tmpfs, so the containers' files, the
socket and everything the service writes exist only on "that machine" (the daemon's side
sees an empty directory). The daemon reaches the service only through sshd: an ``ssh://``
URL whose path is the socket inside the namespace.

Images are the ones this machine's session built, read through ``overlay.imagestore``
(read-only, no copy): what a conversation writes lives in the host's own storage.

Run as a script (``python ssh_podman_host.py inner ...``) it is the namespace's first
process: it mounts the tmpfs, starts the service there and becomes sshd.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
PODMAN = "podman"
CONTAINERS_CONF = """[engine]
runtime = "runc"
[containers]
default_ulimits = ["nofile=1024:20000", "nproc=4096:4096"]
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_key(path: Path) -> None:
    """An ed25519 key pair at ``path`` and ``path``.pub, without a passphrase."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
    )


class SshPodmanHost:
    """sshd + a Podman service in a mount namespace of their own (see the module's text)."""

    def __init__(
        self, graph_root: str, hide: Path | None = None, also_hide: tuple[Path, ...] = ()
    ) -> None:
        """``hide`` (and ``also_hide``): directories of the daemon's the host must not see
        either (each covered by an empty tmpfs in its namespace): a host that shares no disk
        with the daemon."""
        # Podman refuses a run root longer than 50 characters: a short directory of /tmp.
        self.directory = Path(tempfile.mkdtemp(prefix="gwbs-", dir="/tmp"))
        self.remote_dir = self.directory / "remote"
        """Covered by the namespace's tmpfs: empty on the daemon's side."""
        self.socket_path = self.remote_dir / "podman.sock"
        self.host_key = self.directory / "host_key"
        self.client_key = self.directory / "client_key"
        self.known_hosts = self.directory / "known_hosts"
        self.port = 0
        self.graph_root = graph_root
        self.hide = [hide] if hide is not None else []
        self.hide += list(also_hide)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}{self.socket_path}"

    def start(self) -> None:
        self.remote_dir.mkdir(exist_ok=True)
        for key in (self.host_key, self.client_key):
            if not key.exists():
                make_key(key)
        shutil.copy(f"{self.client_key}.pub", self.directory / "authorized_keys")
        (self.directory / "containers.conf").write_text(CONTAINERS_CONF)
        self.port = _free_port()
        public = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {public[0]} {public[1]}\n")
        self._write_sshd_config()
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        argv = ["unshare", "--mount", "--propagation", "private", "--"]
        argv += [sys.executable, __file__, "inner", str(self.directory), self.graph_root]
        argv += [str(path) for path in self.hide]
        with (self.directory / "sshd.log").open("ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while self.remote("version", check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the ssh podman host did not come up: {self.logs()}")
            time.sleep(0.2)

    def _write_sshd_config(self) -> None:
        lines = [
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.directory / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PidFile none",
            "AllowStreamLocalForwarding yes",
            "MaxStartups 100:30:200",
            "MaxSessions 100",
        ]
        (self.directory / "sshd_config").write_text("\n".join(lines) + "\n")

    def logs(self) -> str:
        texts = []
        for name in ("sshd.log", "remote-service.log"):
            path = self.directory / name
            texts.append(f"{name}: {path.read_text() if path.exists() else '(none)'}")
        return "\n".join(texts)

    def remote(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``podman ARGS`` on that host, over SSH, as an operator would."""
        argv = [PODMAN, "--remote", "--url", self.url, "--identity", str(self.client_key)]
        done = subprocess.run(
            [*argv, *args], capture_output=True, text=True, check=False, timeout=120
        )
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, done.args, done.stdout, done.stderr
            )
        return done

    def exists_here(self, path: str) -> bool:
        """Does ``path`` exist on the daemon's side of the mount namespaces?"""
        return Path(path).exists()

    def containers(self, deployment: str) -> dict[str, str]:
        """This host's agent containers of ``deployment``: context id -> container id."""
        listed = self.remote(
            "ps", "-a", "--format", "json", "--filter", f"label=gateway-bot.deployment={deployment}"
        )
        return {
            entry["Labels"]["gateway-bot.context"]: entry["Id"]
            for entry in json.loads(listed.stdout or "[]")
            if entry["Labels"].get("gateway-bot.role") == "agent"
        }

    def namespace_processes(self) -> list[int]:
        """Every process in the host's mount namespace (sshd, the service, conmons, ...)."""
        if self.process is None:
            return []
        try:
            ours = os.readlink(f"/proc/{self.process.pid}/ns/mnt")
        except OSError:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.readlink(entry / "ns" / "mnt") == ours:
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def drop_connections(self) -> int:
        """End every SSH connection to the host (its sshd session processes: the
        connections' side of a network drop); the listener stays. Returns how many."""
        listener = self.process.pid if self.process is not None else None
        dropped = 0
        for pid in self.namespace_processes():
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if name == "sshd" and pid != listener:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    dropped += 1
        return dropped

    def stop(self) -> None:
        """Containers, volumes and networks of this host go, then every process of its
        namespace (the tmpfs, and the storage on it, go with the last of them)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            listed = self.remote("ps", "-aq", check=False).stdout.split()
            if listed:
                self.remote("rm", "-f", "-t", "0", *listed, check=False)
            self.remote("volume", "prune", "-f", check=False)
        for _ in range(50):
            pids = self.namespace_processes()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            time.sleep(0.1)
        self.process.wait(30)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)


def _inner(directory: Path, graph_root: str, hide: list[str]) -> None:
    """In the new mount namespace: the tmpfs, the Podman service on it, then sshd."""
    remote = directory / "remote"
    for path in [str(remote), *hide]:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "tmpfs", path], check=True)
    storage = ["--root", str(remote / "root"), "--runroot", str(remote / "run")]
    storage += ["--storage-driver", "overlay"]
    storage += ["--storage-opt", f"overlay.imagestore={graph_root}"]
    env = dict(os.environ, CONTAINERS_CONF=str(directory / "containers.conf"))
    with (directory / "remote-service.log").open("ab") as log:
        subprocess.Popen(
            [PODMAN, *storage, "system", "service", "--time=0", f"unix://{remote}/podman.sock"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    config = directory / "sshd_config"
    os.execve(SSHD, [SSHD, "-D", "-e", "-f", str(config)], env)


def per_run(name: str) -> str:
    return f"{name}-{secrets.token_hex(3)}"


if __name__ == "__main__" and sys.argv[1:2] == ["inner"]:
    _inner(Path(sys.argv[2]), sys.argv[3], sys.argv[4:])
