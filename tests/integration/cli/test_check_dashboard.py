"""`gateway-bot check` tells an operator where the dashboard will be and whether its tokens
are set, before `run` starts it: the address to open, the login token, the /metrics token.
Without a dashboard section it says there is none. (It used to say nothing at all.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import gateway_env, write_config
from tests.support.fake_anthropic import FakeAnthropic

TOKEN = "a-login-token-of-32-characters!!"


def check(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway_bot", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**gateway_env(), **env},
        timeout=120,
        check=False,
    )


def test_check_names_the_dashboards_address_and_its_tokens(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(tmp_path, target_repo, fake_api)
    plain = check(config)
    assert plain.returncode == 0, plain.stderr
    assert "dashboard: not configured" in plain.stdout

    with config.open("a") as text:  # as the sample config's commented lines say
        text.write("dashboard:\n  token: !env DASHBOARD_TOKEN\n  port: 8951\n")
    served = check(config, DASHBOARD_TOKEN=TOKEN)
    assert served.returncode == 0, served.stderr
    [line] = [line for line in served.stdout.splitlines() if line.startswith("dashboard:")]
    assert line.startswith("dashboard: http://127.0.0.1:8951/; login token set;"), line
    assert "metrics token not set" in line
    assert TOKEN not in served.stdout, "the token itself is never printed"

    unset = check(config)  # the variable the config names is missing: said, not started
    assert unset.returncode == 2
    assert "!env DASHBOARD_TOKEN is not set" in unset.stderr
