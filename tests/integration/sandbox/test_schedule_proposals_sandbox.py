"""The attack from inside a podman sandbox on the daemon's reading of the agent's schedule
request: a loop keeps swapping ``/outbox/schedule.json`` between a decoy request and a link
to a host file holding another request, while tasks end and the daemon reads it. The host
file's request is never carded, quoted or sent; the decoy's may be (it is the agent's own)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.sandbox_fixtures import SandboxSetup


def test_a_request_flipped_to_a_link_never_reads_a_host_file(
    gateway: Any, sandbox: SandboxSetup, tmp_path: Path
) -> None:
    secret = tmp_path / "host-request.json"
    secret.write_text(json.dumps({"when": "every day at 9:00", "prompt": "HOST-SECRET run"}))
    decoy = json.dumps({"when": "every day at 9:00", "prompt": "decoy"})
    flipper = (
        f"printf '%s' '{decoy}' > /tmp/decoy.json && nohup sh -c 'while :; do "
        "cp /tmp/decoy.json /outbox/s.tmp; mv -f /outbox/s.tmp /outbox/schedule.json; "
        f"ln -sfn {secret} /outbox/s.lnk; mv -Tf /outbox/s.lnk /outbox/schedule.json; done'"
        " >/dev/null 2>&1 & sleep 1"
    )
    chat = gateway("chat", "--config", str(sandbox.config()))
    for _attempt in range(3):
        chat.send(f"RUN_BASH {flipper}")
        chat.expect(r"^agent> Echo:")
    chat.send("/schedules")
    chat.expect(r"^agent> (No schedules|Schedules) in this conversation")
    chat.close_input()
    assert chat.wait() == 0, chat.stderr
    shown = "\n".join(chat.lines)
    assert "HOST-SECRET" not in shown
    requests = shown.count("The agent asks to schedule a run") + shown.count(
        "The agent's schedule request was not used"
    )
    assert requests >= 1, "the daemon looked at the request at least once"
    assert not re.search(r"\[file\] \S*schedule\.json", shown), "never an attachment"
    context_id, _ = sandbox.only_container()
    sent = sandbox.conversation_dir(context_id) / "sent"
    for copy in sent.rglob("*"):
        assert not copy.is_symlink(), f"{copy} is a link"
        if copy.is_file():
            assert "HOST-SECRET" not in copy.read_text(errors="replace"), copy
