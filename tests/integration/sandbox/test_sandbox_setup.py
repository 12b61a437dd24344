"""Set-up faults a user meets before any container runs: podman missing, a broken
allowlist in the repo, and building images ahead of time with visible progress."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import gateway_env, write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup, commit_file, podman


@pytest.mark.parametrize(
    ("command", "reason"),
    [("no-such-podman", "podman was not found"), ("/bin/false", "podman does not work here")],
)
def test_without_a_working_podman_check_and_start_fail_with_one_clear_message(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, command: str, reason: str
) -> None:
    broken = {"kind": "podman", "podman": {"command": command}}
    # A model host the sandbox could reach (loopback is refused up front); no request is
    # ever made: the daemon stops at the sandbox.
    agent = {"env": {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://model.test"}}
    config = write_config(tmp_path, target_repo, fake_api, sandbox=broken, agent=agent)
    check = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=60,
    )
    assert check.returncode == 2
    assert f"error: the sandbox (podman) cannot run: {reason}" in check.stdout

    chat = gateway("chat", "--config", str(config))
    assert chat.wait() == 2
    assert f"The sandbox cannot run: {reason}" in chat.stderr
    assert "Traceback" not in chat.stderr
    assert chat.count(r"^agent> ") == 0


def test_a_broken_network_allowlist_is_reported_to_the_user(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    commit_file(
        target_repo, ".gateway/network-allowlist.yaml", "allow:\n  - host: a.com\n    port: 1\n"
    )
    chat = gateway("chat", "--config", str(write_config(tmp_path, target_repo, fake_api)))
    chat.send("anything")
    chat.expect(r"The repo config \.gateway/network-allowlist\.yaml has problems")
    chat.expect(r"allow\.0\.port")
    chat.close_input()
    assert chat.wait() == 0
    assert fake_api.requests == [], "no agent ran"


def test_image_build_shows_its_progress_and_skips_what_is_up_to_date(
    sandbox: SandboxSetup, tmp_path: Path
) -> None:
    containerfile = tmp_path / "Containerfile"
    token = secrets.token_hex(4)
    containerfile.write_text(f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nRUN echo {token} > /marker\n")
    command = [sys.executable, "-m", "gateway_bot", "image", "build"]
    command += ["--config", str(sandbox.config()), "--containerfile", str(containerfile)]

    def build() -> str:
        done = subprocess.run(
            command, capture_output=True, text=True, env=gateway_env(), timeout=900
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    first = build()
    tag = first.split("agent image: ")[1].split()[0]
    try:
        assert "STEP 1/3: FROM localhost/gateway-bot/base" in first, "steps show as they run"
        assert f"RUN echo {token}" in first
        second = build()
        assert f"{tag} is up to date" in second
        assert "STEP" not in second
    finally:
        podman("rmi", tag, check=False)
