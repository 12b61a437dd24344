"""More odd request targets through the real proxy, made up by hypothesis: each must get
the verdict the server's own routing calls for (the oracle of test_egress_targets.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.test_egress_targets import Case, _disagreement, _rules
from tests.support.egress_rig import ProxyRig

_PIECES = [
    "pub", "admin", "repo.git", "git-receive-pack", "Git-Receive-Pack", "%67it-receive-pack",
    "git-upload-pack", "", ".", "..", "%2e%2e", "%252e", ";x", "%3b", "%2f", "%2F", "%5c", "#",
    "%23", "?", "%3f", "x", "%00", "%20", "a%25b",
]  # fmt: skip
targets = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=5).map(
    lambda parts: "/" + "/".join(parts)
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=targets, method=st.sampled_from(["GET", "POST", "post"]))
def test_made_up_targets_get_the_servers_verdict(
    proxy_rig: ProxyRig, path: str, method: str
) -> None:
    rules = _rules(proxy_rig)
    proxy_rig.route(rules["app"])
    proxy_rig.answer = "allow"
    case = Case("app", "any", method, "http://{A}" + path, "HTTP/1.1", "", "generated")
    assert _disagreement(proxy_rig, rules, case) is None
