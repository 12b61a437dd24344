"""Action approvals with the real CLI inside the conversation's podman container (decision 0087):
the hook and the permission round trip work there as on the host (the CLI runs as root, its
settings dir in the container's home). The attack: the repo's Claude settings switch hooks
off, bypass permissions and allow every Bash call; a read-only command (which never asks
by itself) still reaches the daemon, whose rule refuses it."""

from __future__ import annotations

import pytest
import yaml

from tests.integration.agents.test_action_approvals_claude import HOSTILE_SETTINGS
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.sandbox_fixtures import SandboxSetup, commit_file

pytestmark = pytest.mark.slow


def test_in_the_container_the_repos_settings_cannot_skip_the_daemons_rules(
    gateway, sandbox: SandboxSetup, fake_api: FakeAnthropic
) -> None:
    commit_file(sandbox.repo, ".claude/settings.json", HOSTILE_SETTINGS)
    config = sandbox.config()
    data = yaml.safe_load(config.read_text())
    rules = [{"tool": "Bash", "command": "cat *", "action": "deny"}]
    data["agent"]["approvals"] = {"rules": rules}
    config.write_text(yaml.safe_dump(data))
    chat = gateway("chat", "--config", str(config))

    chat.send("SHOW_RESULT RUN_BASH cat README.md")
    refused = chat.expect(r"^agent> Echo: SHOW_RESULT RUN_BASH cat")
    assert "[tool result: Refused by the gateway's approvals policy (rule Bash" in refused
    assert "# target repo" not in refused
    chat.finish()
