"""Environment for a process in a container, handed to ``podman exec --env-file``.

Never through the podman CLI's own environment: variables meant for the agent (a repo's
``container_env`` among them) would otherwise configure the host's podman, which runs as
root (``PATH``, ``LD_PRELOAD``, ``CONTAINERS_CONF``, ``CONTAINER_HOST``, ``TMPDIR`` all
change what it runs or talks to). Nor through argv, where every host user can read them.
Each exec gets a file of ``NAME=value`` lines, mode 0600, in a directory only the daemon
can see, removed when the process has exited.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

VALID_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ExecEnvError(ValueError):
    """A variable cannot be passed safely; the message names it."""


class ExecEnvFiles:
    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def clear(self) -> None:
        """Remove files a killed daemon left behind (the start of every run)."""
        shutil.rmtree(self._directory, ignore_errors=True)

    def write(self, env: Mapping[str, str]) -> Path:
        lines = []
        for name, value in env.items():
            if not VALID_NAME.fullmatch(name):
                raise ExecEnvError(f"environment variable name {name!r} is not valid")
            if "\n" in value or "\r" in value or "\0" in value:
                raise ExecEnvError(f"environment variable {name} has a line break in its value")
            lines.append(f"{name}={value}\n")
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._directory, 0o700)
        path = self._directory / f"{secrets.token_hex(12)}.env"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(lines))
        return path

    @staticmethod
    def remove(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
