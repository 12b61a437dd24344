"""The README's `gateway-bot check` works in a new login shell after set-up, also for root on
Debian, whose login shell never puts ~/.local/bin on PATH (it used to say "command not
found", with the hint only in a log file). Set-up's launcher step runs as written, for root
with a fresh home, in a mount namespace of its own whose /usr/local/bin is a temporary
directory (nothing of the machine's is written); then a login shell types the command."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(os.geteuid() != 0, reason="the case of root (as on the CI machines)")
def test_root_finds_gateway_bot_in_a_new_login_shell_after_set_up(tmp_path: Path) -> None:
    home, system_bin = tmp_path / "root-home", tmp_path / "usr-local-bin"
    home.mkdir()
    system_bin.mkdir()
    step = PROJECT / "scripts" / "setup.d" / "25-launcher.sh"
    venv = os.environ.get("VIRTUAL_ENV") or str(PROJECT / ".venv")
    script = " && ".join(
        [
            f"mount --bind {shlex.quote(str(system_bin))} /usr/local/bin",
            # set-up as root runs it, from the project, in a shell without ~/.local/bin
            f"cd {shlex.quote(str(PROJECT))}",
            f"HOME={shlex.quote(str(home))} SHELL=/bin/bash PATH=/usr/bin:/bin "
            f"UV_PROJECT_ENVIRONMENT={shlex.quote(venv)} bash {shlex.quote(str(step))}",
            # a new login shell, anywhere: the README's line
            f"cd / && env -i HOME={shlex.quote(str(home))} TERM=dumb bash -lc 'gateway-bot --help'",
        ]
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: gateway-bot" in done.stdout
    assert (system_bin / "gateway-bot").is_file()
    assert "note: gateway-bot is in /usr/local/bin, on PATH in a new login shell" in done.stderr
