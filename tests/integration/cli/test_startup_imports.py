"""Start-up imports only what the configuration uses (AGENTS.md, Conventions).

Every restart of the daemon, ``chat`` and ``gateway-bot --help`` used to import every
channel library, podman-py, the dashboard and aiohttp: seconds of CPU before the first log
line. These tests are structural, not timings: a fresh interpreter runs the real entry
point, then lists ``sys.modules``, and no library of an unconfigured part may be in it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import FakeAnthropic, gateway_env, write_config

UNCONFIGURED = {
    # channels
    "nio": "matrix-nio (Matrix channel)",
    "slack_sdk": "slack-sdk (Slack channel)",
    "slack_bolt": "slack-bolt (Slack channel)",
    "imapclient": "imapclient (email channel)",
    "msal": "msal (email channel's OAuth)",
    "bs4": "beautifulsoup4 (email channel)",
    # sandbox and state
    "mitmproxy": "mitmproxy (only ever inside the egress proxy's container)",
    "podman": "podman-py (the podman sandbox)",
    "requests": "requests (podman-py's)",
    "psycopg": "psycopg (PostgreSQL state)",
    # the dashboard, and aiohttp (the dashboard's server, Matrix's and Slack's client)
    "prometheus_client": "prometheus-client (the dashboard's /metrics)",
    "jinja2": "jinja2 (the dashboard's pages)",
    "aiohttp": "aiohttp (dashboard, Matrix, Slack)",
}

# Runs the real CLI in this interpreter, then prints the top-level packages imported.
# For ``run``: a thread waits for the control socket (served once the daemon has started
# every part) and sends SIGTERM, the daemon's ordinary stop, so start and stop both count.
PROBE = """
import json, os, signal, sys, threading, time
from pathlib import Path
from gateway_bot.cli import main

args = sys.argv[1:]
if args[0] == "run":
    socket = Path(os.environ["PROBE_STATE_DIR"]) / "control" / "daemon.sock"

    def stop_when_serving() -> None:
        deadline = time.monotonic() + 90
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("serving" if socket.exists() else "never served", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_serving, daemon=True).start()
try:
    code = main(args)
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules}),
                  "gateway_bot": sorted(m for m in sys.modules if m.startswith("gateway_bot"))}))
"""


def _probe(*args: str, state_dir: Path | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**gateway_env(), "PROBE_STATE_DIR": str(state_dir or "")},
        timeout=180,
    )
    assert done.returncode == 0, f"the probe failed:\n{done.stdout}\n{done.stderr}"
    last = done.stdout.strip().splitlines()[-1]
    result: dict[str, object] = json.loads(last)
    result["stderr"] = done.stderr
    return result


def _unconfigured(modules: object) -> dict[str, str]:
    assert isinstance(modules, list)
    return {name: why for name, why in UNCONFIGURED.items() if name in modules}


def test_help_imports_no_config_daemon_channel_or_sandbox_library() -> None:
    result = _probe("--help")
    assert result["code"] == 0
    assert _unconfigured(result["modules"]) == {}
    modules, loaded = result["modules"], result["gateway_bot"]
    assert isinstance(modules, list)
    assert isinstance(loaded, list)
    assert "pydantic" not in modules, "--help needs no config model"
    assert "gateway_bot.runtime.daemon" not in loaded


def test_console_sqlite_host_daemon_imports_no_unconfigured_library(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    """The README's first configuration: the console, SQLite state, ``sandbox: none``, no
    dashboard. The daemon starts fully (its control socket answers) and stops on SIGTERM."""
    config = write_config(tmp_path, target_repo, fake_api)
    result = _probe("run", "--config", str(config), state_dir=tmp_path / "state")
    assert "serving" in str(result["stderr"]), result["stderr"]
    assert result["code"] == 0, result["stderr"]
    assert _unconfigured(result["modules"]) == {}
    loaded = result["gateway_bot"]
    assert isinstance(loaded, list)
    assert "gateway_bot.channels.console" in loaded  # what it does run is imported
    assert not [m for m in loaded if m.startswith(("gateway_bot.channels.matrix",
                                                   "gateway_bot.channels.slack",
                                                   "gateway_bot.channels.email",
                                                   "gateway_bot.sandbox.podman",
                                                   "gateway_bot.dashboard"))]  # fmt: skip
