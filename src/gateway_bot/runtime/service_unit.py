"""``gateway-bot install-service``: a systemd user unit that runs ``gateway-bot run`` for
one config, restarted whenever it stops (``Restart=always``), and what to type to enable it.

The unit names everything absolutely (the program, the config, the environment file, the
working directory) because a user manager starts it with none of the shell's context, and
it carries the installer's ``PATH``: the daemon needs the agent CLI and podman from it.
Secrets stay out of the unit: they are read from the ``EnvironmentFile`` (optional, ``-``:
a missing file is not a failed start; the config's ``!env`` names then say what is missing).
``TimeoutStopSec`` leaves the daemon its ``execution.shutdown_timeout_seconds`` to finish
running tasks on SIGTERM, plus a margin, before systemd kills it.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_NAME = "gateway-bot"
STOP_MARGIN_S = 30
RESTART_DELAY_S = 5


@dataclass(frozen=True)
class UnitSettings:
    config: Path
    environment_file: Path
    program: tuple[str, ...]
    """How to start gateway-bot: its script, or this Python with ``-m gateway_bot``."""
    path_variable: str
    shutdown_timeout_s: float


def default_unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def this_program() -> tuple[str, ...]:
    """The gateway-bot script beside this interpreter (a venv's or pipx's bin), else the
    interpreter itself with ``-m gateway_bot``."""
    script = Path(sys.executable).with_name("gateway-bot")
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (sys.executable, "-m", "gateway_bot")


def _quoted(word: str, *, variables: bool) -> str:
    """One double-quoted word with systemd's escapes: ``%`` specifiers are expanded in
    every setting, ``$`` variables only in ExecStart= (``variables``)."""
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if variables:
        escaped = escaped.replace("$", "$$")
    return f'"{escaped}"'


def _path_setting(value: str) -> str:
    """A path for a setting that takes one path (no quoting there): only ``%`` escaped."""
    return value.replace("%", "%%")


class UnsafeUnitValue(ValueError):
    """A path or PATH with a control character: a line break would start a new directive."""


def _refuse_control(values: Sequence[str]) -> None:
    for value in values:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise UnsafeUnitValue(f"a control character in {value!r}: not written into a unit")


def render_unit(settings: UnitSettings) -> str:
    command = [*settings.program, "run", "--config", str(settings.config)]
    _refuse_control([*command, *(str(v) for v in vars(settings).values() if v is not None)])
    stop_s = int(settings.shutdown_timeout_s) + STOP_MARGIN_S
    return "\n".join(
        [
            "# Written by `gateway-bot install-service`; run it again to rewrite.",
            "[Unit]",
            f"Description=gateway-bot daemon ({_path_setting(str(settings.config))})",
            "",
            "[Service]",
            "Type=exec",
            f"ExecStart={' '.join(_quoted(word, variables=True) for word in command)}",
            f"WorkingDirectory={_path_setting(str(settings.config.parent))}",
            f"EnvironmentFile=-{_path_setting(str(settings.environment_file))}",
            f"Environment={_quoted('PATH=' + settings.path_variable, variables=False)}",
            "Environment=PYTHONUNBUFFERED=1",
            "Restart=always",
            f"RestartSec={RESTART_DELAY_S}",
            "KillSignal=SIGTERM",
            "KillMode=mixed",
            f"TimeoutStopSec={stop_s}",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def instructions(unit: Path, name: str) -> str:
    user = getpass.getuser()
    return "\n".join(
        [
            f"Wrote {unit}",
            "Start it now and whenever you log in:",
            "  systemctl --user daemon-reload",
            f"  systemctl --user enable --now {name}.service",
            "Keep it running when you are logged out, and start it at boot:",
            f"  loginctl enable-linger {user}",
            f"Logs: journalctl --user -u {name}.service -f",
            f"Status: systemctl --user status {name}.service",
        ]
    )


def valid_unit_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", name)) and not name.startswith(".")


def install_unit(settings: UnitSettings, unit_dir: Path, name: str) -> Path:
    """Write ``<unit_dir>/<name>.service`` atomically; returns its path."""
    unit_dir.mkdir(parents=True, exist_ok=True)
    unit = unit_dir / f"{name}.service"
    partial = unit_dir / f".{name}.service.{os.getpid()}.partial"
    partial.write_text(render_unit(settings))
    partial.replace(unit)
    return unit
