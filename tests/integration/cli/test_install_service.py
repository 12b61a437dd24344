"""`gateway-bot install-service`: the unit it writes is one systemd accepts
(`systemd-analyze verify --user`, with no warning), restarts always, names the config and
the environment file absolutely, and its ExecStart, read back the way systemd unquotes it,
starts the daemon on that config, even from a path with a space, `%` and `$` in it. The
output tells the user how to enable the unit and lingering. (No user manager runs on the
test machines, so systemd itself never starts the unit here.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import gateway_env, write_config
from tests.support.fake_anthropic import FakeAnthropic

AWKWARD = "my conf 100% $HOME.yaml"


def unit_lines(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for each setting; fails on anything systemd would not read
    as a setting (stricter than configparser, which also refuses the repeated keys systemd
    allows, such as Environment=)."""
    found, section = [], ""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if re.fullmatch(r"\[[A-Za-z]+\]", line):
            section = line[1:-1]
            continue
        key, equals, value = line.partition("=")
        assert equals, f"not a setting: {line}"
        assert re.fullmatch(r"[A-Za-z]+", key), f"not a key: {line}"
        assert section, f"a setting outside a section: {line}"
        found.append((section, key, value))
    return found


def setting(lines: list[tuple[str, str, str]], section: str, key: str) -> list[str]:
    return [v for s, k, v in lines if (s, k) == (section, key)]


def unescape(word: str) -> str:
    """systemd's specifier and variable escapes, after shlex removed the quotes."""
    return word.replace("%%", "%").replace("$$", "$")


def install(tmp_path: Path, fake_api: FakeAnthropic, target_repo: Path) -> tuple[Path, Path, str]:
    written = write_config(tmp_path, target_repo, fake_api)
    config = tmp_path / AWKWARD
    written.rename(config)
    units = tmp_path / "units"
    done = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "install-service", "--config", str(config),
         "--unit-dir", str(units)],
        capture_output=True, text=True, env=gateway_env(), cwd=tmp_path, check=False,
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return config, units / "gateway-bot.service", done.stdout


def test_the_unit_restarts_always_and_says_how_to_enable_it(
    tmp_path: Path, fake_api: FakeAnthropic, target_repo: Path
) -> None:
    config, unit, output = install(tmp_path, fake_api, target_repo)
    assert f"Wrote {unit}" in output
    assert "systemctl --user daemon-reload" in output
    assert "systemctl --user enable --now gateway-bot.service" in output
    assert re.search(r"loginctl enable-linger \S+", output)
    lines = unit_lines(unit.read_text())
    assert setting(lines, "Service", "Restart") == ["always"]
    assert setting(lines, "Service", "EnvironmentFile") == [f"-{tmp_path}/.env"]
    assert setting(lines, "Install", "WantedBy") == ["default.target"]
    [exec_start] = setting(lines, "Service", "ExecStart")
    argv = [unescape(word) for word in shlex.split(exec_start)]
    assert argv[-3:] == ["run", "--config", str(config)]
    assert Path(argv[0]).is_absolute()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_accepts_the_unit_without_a_warning(
    tmp_path: Path, fake_api: FakeAnthropic, target_repo: Path
) -> None:
    _, unit, _ = install(tmp_path, fake_api, target_repo)
    runtime = tmp_path / "runtime"  # a user manager's runtime dir; none exists here
    runtime.mkdir(mode=0o700)
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--user", str(unit)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        check=False,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == "", "systemd warned about the unit"

    broken = unit.with_name("broken.service")  # the check is a real one: it does complain
    broken.write_text(unit.read_text().replace("Restart=always", "Restart=sometimes"))
    complained = subprocess.run(
        ["systemd-analyze", "verify", "--user", str(broken)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        check=False,
        timeout=60,
    )
    assert "restart specifier" in complained.stderr


def test_the_units_command_line_starts_the_daemon_on_that_config(
    tmp_path: Path, fake_api: FakeAnthropic, target_repo: Path
) -> None:
    _, unit, _ = install(tmp_path, fake_api, target_repo)
    lines = unit_lines(unit.read_text())
    [exec_start] = setting(lines, "Service", "ExecStart")
    [directory] = setting(lines, "Service", "WorkingDirectory")
    [path_setting] = setting(lines, "Service", "Environment")[:1]
    path = unescape(shlex.split(path_setting)[0]).removeprefix("PATH=")
    log = tmp_path / "daemon.log"
    with log.open("w") as stderr:
        daemon = subprocess.Popen(
            [unescape(word) for word in shlex.split(exec_start)],
            cwd=directory,
            env={**gateway_env(), "PATH": path},
            stdin=subprocess.PIPE,  # as under systemd: no terminal
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 120
        while "control socket at" not in log.read_text():
            assert daemon.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert str(tmp_path / "state") in log.read_text(), "it runs on the config's state"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0, log.read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
