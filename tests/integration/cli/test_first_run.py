"""A newcomer's first half hour, on a copy of this checkout: set-up with the distribution's
Python (PEP 668: no `pip install --user`), then the README's commands in a new shell whose
PATH is only what the README documents, the sample config checked as it is, and
`scripts/chat.sh` letting exported variables beat `.env`.

The copy is a fresh clone in all but one thing: its `.tools/node_modules` (the pinned Claude
Code package, ~200 MB) is linked to this checkout's rather than downloaded again. uv's
package cache is shared for the same reason. HOME is a temporary directory, so nothing
here touches the real `~/.local/bin` or this working tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import GIT_IDENTITY
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.paths import PROJECT_ROOT

PROJECT = PROJECT_ROOT
COPIED = ("pyproject.toml", "uv.lock", "README.md", "Containerfile", "src", "scripts")
COPIED_TOO = ("examples", "images")
SYSTEM_PATH = "/usr/bin:/bin"
"""Where Debian and Ubuntu keep their own python3: first on PATH for set-up."""


@dataclass
class Checkout:
    root: Path
    home: Path
    podman_socket: Path
    setup: subprocess.CompletedProcess[str] | None = None
    """The first set-up's result."""

    @property
    def documented_path(self) -> str:
        """The PATH the README promises is enough: ~/.local/bin plus the system's."""
        return f"{self.home}/.local/bin:{SYSTEM_PATH}"

    def env(self, path: str, **extra: str) -> dict[str, str]:
        """A new login shell on this machine: its site settings (CA bundle, pip's index)
        kept; PATH, HOME and everything this test run's own tools set dropped. The podman
        socket is the test session's, so no service outlives the session (an environment
        override, which the README documents for every key)."""
        dropped = ("UV", "VIRTUAL_ENV", "PYTHON", "PYENV", "ANTHROPIC", "CLAUDE", "GATEWAY", "XDG_")
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(dropped) and key not in ("PATH", "HOME")
        }
        env.update(HOME=str(self.home), PATH=path, UV_CACHE_DIR=_uv_cache())
        env["GATEWAY_BOT_SANDBOX__PODMAN__SOCKET"] = str(self.podman_socket)
        env.update(extra)
        return env

    def set_up(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "scripts/setup.sh"],
            cwd=self.root,
            env=self.env(SYSTEM_PATH),
            capture_output=True,
            text=True,
            timeout=1800,
        )


def _uv_cache() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        return ""
    found = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=False)
    return found.stdout.strip()


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory, podman_socket: Path) -> Checkout:
    """A fresh copy of this checkout, set up with /usr/bin/python3 and no uv on PATH."""
    base = tmp_path_factory.mktemp("first-run")
    root, home = base / "gateway-bot", base / "home"
    home.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*COPIED, *COPIED_TOO):
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=ignore)
        else:
            root.mkdir(exist_ok=True)
            shutil.copy2(source, root / name)
    shutil.rmtree(root / "examples" / "state", ignore_errors=True)  # a check's leftovers
    (root / ".tools").mkdir()
    (root / ".tools" / "node_modules").symlink_to(PROJECT / ".tools" / "node_modules")
    for step in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        [*GIT_IDENTITY, "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(root), *step], check=True)
    assert shutil.which("uv", path=SYSTEM_PATH) is None, "uv must not be on the system PATH"
    checkout = Checkout(root, home, podman_socket)
    checkout.setup = checkout.set_up()
    return checkout


def test_set_up_works_with_the_distributions_python(checkout: Checkout) -> None:
    setup = checkout.setup
    assert setup is not None
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert shutil.which("python3", path=SYSTEM_PATH) == "/usr/bin/python3"
    uv = checkout.root / ".tools" / "uv" / "bin" / "uv"
    assert subprocess.run([str(uv), "--version"], check=False).returncode == 0
    assert (checkout.home / ".local" / "bin" / "uv").resolve() == uv.resolve()
    venv = (checkout.root / ".venv" / "pyvenv.cfg").read_text()
    assert "home = /usr/bin\n" in venv, venv
    output = setup.stdout + setup.stderr
    assert output.count("base image:") == 1, output
    assert "build argument" not in output, output


def test_set_up_again_changes_nothing(checkout: Checkout) -> None:
    launcher = checkout.home / ".local" / "bin" / "gateway-bot"
    before = (launcher.stat().st_mtime_ns, (checkout.root / ".tools" / "uv").stat().st_ino)
    again = checkout.set_up()
    assert again.returncode == 0, again.stdout + again.stderr
    after = (launcher.stat().st_mtime_ns, (checkout.root / ".tools" / "uv").stat().st_ino)
    assert after == before


def test_the_readme_daemon_lines_work_in_a_new_shell(checkout: Checkout) -> None:
    env = checkout.env(checkout.documented_path, ANTHROPIC_API_KEY="test-key")
    check = subprocess.run(
        ["gateway-bot", "check", "--config", "examples/gateway-bot.yaml"],
        cwd=checkout.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"repo {checkout.root}," in check.stdout, "no GATEWAY_REPO: the current repo"
    claude = checkout.root / ".tools" / "node_modules" / ".bin" / "claude"
    assert f"agent: {claude}\n" in check.stdout, check.stdout
    assert "sandbox: podman works" in check.stdout
    assert "warning" not in check.stdout + check.stderr
    anywhere = subprocess.run(
        ["gateway-bot", "--help"], cwd="/", env=env, capture_output=True, text=True, check=False
    )
    assert anywhere.returncode == 0, anywhere.stderr
    assert subprocess.run(["uv", "--version"], env=env, check=False).returncode == 0


def test_chat_sh_lets_exported_variables_beat_dotenv(
    checkout: Checkout, fake_api: FakeAnthropic, target_repo: Path, tmp_path: Path
) -> None:
    dotenv = checkout.root / ".env"
    dotenv.write_text(
        f"ANTHROPIC_API_KEY=key-from-dotenv\nANTHROPIC_BASE_URL={fake_api.base_url}\n"
    )
    config = tmp_path / "console.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "state_dir": str(tmp_path / "state"),
                "repo": {"url": str(target_repo)},
                "agent": {"timeout_seconds": 120, "env": {"CLAUDE_CODE_MAX_RETRIES": "0"}},
                "sandbox": {"kind": "none"},
                "channels": {"console": {}},
            }
        )
    )
    try:
        chat = subprocess.run(
            ["bash", str(checkout.root / "scripts" / "chat.sh"), "--config", str(config)],
            cwd=target_repo,
            env=checkout.env(checkout.documented_path, ANTHROPIC_API_KEY="key-exported"),
            input="hello from the console\n",
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        dotenv.unlink()
    assert chat.returncode == 0, chat.stdout + chat.stderr
    assert "agent> Echo: hello from the console" in chat.stdout, chat.stdout + chat.stderr
    keys = {seen["x-api-key"] for _, seen in fake_api.credentials_seen if "x-api-key" in seen}
    assert keys == {"key-exported"}, "the exported key wins; .env still gave the base URL"
