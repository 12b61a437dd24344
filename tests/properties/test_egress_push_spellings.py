"""Property: no spelling of a git push that some server routes to receive-pack is let out
without a decision (hypothesis, on the proxy's reading and verdict alone; the same through
the real proxy is in tests/security/test_egress_targets_generated.py).

A server's reading is modelled here independently of ``target.py``: the fragment and query
cut, decoded zero to three times, backslashes as slashes or not, ``;parameters`` kept or
dropped, dot segments resolved, slashes merged, any case or not.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from urllib.parse import unquote

from hypothesis import example, given
from hypothesis import strategies as st

from gateway_bot.sandbox.egress.rules import ALLOW, GIT_PUSH_ASK, EgressRule, judge
from gateway_bot.sandbox.egress.target import AmbiguousTarget, read_target

OPEN = EgressRule("git.example.org")
_PIECES = [
    "repo.git", "git-receive-pack", "GIT-receive-pack", "git-receive-%70ack", "%67it-receive-pack",
    "", ".", "..", "%2e", "%2e%2e", "%252e", ";x", "%3b", "%2f", "%252f", "%5c", "\\", "#", "%23",
    "?", "%3f", "x", "info", "refs",
]  # fmt: skip
paths = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6).map(lambda p: "/" + "/".join(p))


def _readings(target: str) -> set[str]:
    found = set()
    for decodings, backslash, params, case in itertools.product(
        range(4), (False, True), (False, True), (False, True)
    ):
        path = target.split("#", 1)[0].split("?", 1)[0]
        for _ in range(decodings):
            path = unquote(path)
        path = re.split(r"[?#]", path, maxsplit=1)[0]
        if backslash:
            path = path.replace("\\", "/")
        if params:
            path = "/".join(segment.split(";", 1)[0] for segment in path.split("/"))
        path = posixpath.normpath("/" + path.lstrip("/"))
        found.add(path.lower() if case else path)
    return found


@given(paths)
@example("/repo.git/git-receive-pack#x")
@example("/repo.git/git-receive-pack%23x")
@example("/repo.git%2fgit-receive-pack")
@example("/x/../repo.git/git-receive-pack;x")
def test_a_push_some_server_routes_is_never_let_out_unasked(path: str) -> None:
    pushes = any(r.endswith("/git-receive-pack") for r in _readings(path))
    try:
        target = read_target("POST", path, scheme="https", host="git.example.org", port=443)
    except AmbiguousTarget:
        return  # refused with a 400
    verdict = judge((OPEN, GIT_PUSH_ASK), target).action
    if pushes:
        assert verdict != ALLOW, (path, target.readings)
