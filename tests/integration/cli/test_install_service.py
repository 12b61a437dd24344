"""`gateway-bot install-service`: the unit it writes is one systemd accepts
(`systemd-analyze verify --user`, with no warning), restarts always, names the config and
the environment file absolutely, and its ExecStart, read back the way systemd unquotes it,
starts the daemon on that config, even from a path with a space, `%` and `$` in it. The
output tells the user how to enable the unit and lingering. A unit that could not start
(`check` fails in its working directory, with its environment) is refused with the reason.
(No user manager runs on the test machines, so systemd itself never starts the unit here.)"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.conftest import gateway_env, write_config
from tests.support.fake_anthropic import FakeAnthropic

AWKWARD = "my conf 100% $HOME.yaml"
PROJECT = Path(__file__).resolve().parents[3]


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


def systemd_verify(unit: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify --user`` (Debian's systemd package; a set-up step installs
    it), with a user manager's runtime dir of its own: none runs here."""
    # Short: socket units of the distribution's own put their sockets in it (108 bytes).
    with tempfile.TemporaryDirectory(prefix="gwbt-rt-", dir="/tmp") as runtime:
        return subprocess.run(
            ["systemd-analyze", "verify", "--user", str(unit)],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": runtime},
            check=False,
            timeout=60,
        )


def test_systemd_accepts_the_unit_without_a_warning(
    tmp_path: Path, fake_api: FakeAnthropic, target_repo: Path
) -> None:
    _, unit, _ = install(tmp_path, fake_api, target_repo)
    verified = systemd_verify(unit)
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == "", "systemd warned about the unit"

    broken = unit.with_name("broken.service")  # the check is a real one: it does complain
    broken.write_text(unit.read_text().replace("Restart=always", "Restart=sometimes"))
    assert "restart specifier" in systemd_verify(broken).stderr


def test_a_unit_that_could_not_start_is_refused_with_the_reason_not_written(
    tmp_path: Path, fake_api: FakeAnthropic, target_repo: Path
) -> None:
    """The README's sample config, copied to a server folder and installed from the project
    (where `check` passes: the repo is found from the current directory and the key is
    exported in this shell). The unit would run in the config's folder with only its
    environment file: install-service says why, one problem at a time, and writes nothing
    until the unit could start; then it passes systemd's own check."""
    server = tmp_path / "srv"
    server.mkdir()
    config = server / "gateway-bot.yaml"
    sample = (PROJECT / "examples" / "gateway-bot.yaml").read_text()
    config.write_text(sample.replace("  kind: podman ", "  kind: none   "))  # no podman here
    units = tmp_path / "units"
    shell = {**gateway_env(), "ANTHROPIC_API_KEY": "test-key"}

    def gateway_bot(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway_bot", *args, "--config", str(config)],
            capture_output=True, text=True, env=shell, cwd=target_repo, check=False,
            timeout=300,
        )  # fmt: skip

    assert gateway_bot("check").returncode == 0, "checks here, from the project"
    installed = gateway_bot("install-service", "--unit-dir", str(units))
    assert installed.returncode == 2
    assert "nothing written: the unit would fail at every start" in installed.stderr
    assert f"in {server}" in installed.stderr
    assert "repo.url: Field required" in installed.stderr
    assert not units.exists()

    config.write_text(
        config.read_text().replace(
            "# url: https://github.com/you/project.git", f"url: {target_repo}"
        )
    )
    installed = gateway_bot("install-service", "--unit-dir", str(units))
    assert installed.returncode == 2, "the key is this shell's, not the unit's"
    assert "No model credentials" in installed.stderr
    assert f"{server / '.env'}, which does not exist" in installed.stderr
    assert not units.exists()

    (server / ".env").write_text(
        f"ANTHROPIC_API_KEY=test-key\nANTHROPIC_BASE_URL={fake_api.base_url}\n"
    )
    installed = gateway_bot("install-service", "--unit-dir", str(units))
    assert installed.returncode == 0, installed.stderr
    unit = units / "gateway-bot.service"
    lines = unit_lines(unit.read_text())
    assert setting(lines, "Service", "WorkingDirectory") == [str(server)]
    assert setting(lines, "Service", "EnvironmentFile") == [f"-{server / '.env'}"]
    verified = systemd_verify(unit)
    assert (verified.returncode, verified.stderr) == (0, "")


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
