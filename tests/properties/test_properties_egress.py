"""Property-based attacks on the egress rule matcher (hypothesis).

The matcher is the sandbox's network boundary: whatever path or address an agent makes up,
a request it lets through under a path rule must be under that rule however a server
reads the path, and a wildcard rule must never dial the host, cloud metadata or a private
network. Examples are drawn from the alphabets attackers use (dot segments, percent
encodings, doubled encodings, ``;`` parameters, backslashes), not from random unicode
alone, so hypothesis finds the interesting cases within its default budget.
"""

from __future__ import annotations

import ipaddress
import posixpath
from urllib.parse import unquote

from hypothesis import example, given
from hypothesis import strategies as st

from gateway_bot.sandbox.egress.rules import (
    EgressRule,
    UnsafePath,
    decide,
    decide_address,
    normal_path,
)

PUB = EgressRule(host="files.example.com", paths=("/pub/*",))
_PIECES = [
    "pub",
    "secret",
    "x",
    ".",
    "..",
    "%2e",
    "%2E%2e",
    "%252e%252e",
    "%2f",
    "%252f",
    "%5c",
    "\\",
    ";v=1",
    "..;x",
    "%00",
    "%",
    "%25",
    "",
    "a%20b",
    "?",
    "#",
]
segments = st.lists(st.sampled_from(_PIECES), min_size=0, max_size=8)


def _path(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def _readings(path: str) -> list[str]:
    """The ways a server might read ``path``: decoded 0 to 5 times, with ``;`` parameters
    kept or dropped, dot segments resolved (posixpath, slashes merged) or taken as written
    (an object store's key)."""
    found = []
    current = path.split("?", 1)[0]
    for _ in range(6):
        found.append(current)
        for variant in (current, "/".join(s.split(";", 1)[0] for s in current.split("/"))):
            found.append(posixpath.normpath("/" + variant.lstrip("/")))
        current = unquote(current)
    return found


@given(segments)
@example(["pub", "..", "secret"])
@example(["pub", "%2e%2e", "secret"])
@example(["pub", "%252e%252e", "secret"])
@example(["pub", "..;x", "secret"])
@example(["pub", "x", "..", "..", "secret"])
@example(["secret", "..", "pub", "x"])
def test_a_path_let_through_a_path_rule_is_under_it_in_every_reading(parts: list[str]) -> None:
    path = _path(parts)
    verdict = decide([PUB], "GET", "files.example.com", path)
    if verdict.allowed:
        for reading in _readings(path):
            assert reading == "/pub" or reading.startswith("/pub/"), (path, reading)


@given(segments)
def test_normal_path_refuses_or_yields_a_clean_absolute_path(parts: list[str]) -> None:
    try:
        normal = normal_path(_path(parts))
    except UnsafePath:
        return
    assert normal.startswith("/")
    assert "\\" not in normal
    assert all(segment not in (".", "..") for segment in normal.split("/")[:-1])
    assert "%2f" not in normal.lower()
    assert "%5c" not in normal.lower()


@given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "get", "Post"]), segments)
def test_a_method_rule_never_lets_another_method_through(method: str, parts: list[str]) -> None:
    rule = EgressRule(host="api.example.com", methods=("GET", "HEAD"))
    verdict = decide([rule], method, "api.example.com", _path(parts))
    assert verdict.allowed == (method.upper() in ("GET", "HEAD"))


@given(
    st.sampled_from(["files.example.com", "FILES.example.com.", "evil.com", "example.com"]),
    st.sampled_from(["", ".evil.com", ":443", "@evil.com", "\x00"]),
)
def test_only_the_named_host_matches(host: str, suffix: str) -> None:
    name = host + suffix
    allowed = decide([EgressRule(host="files.example.com")], "GET", name, "/").allowed
    assert allowed == (suffix == "" and host.lower().rstrip(".") == "files.example.com")


_NON_PUBLIC = [
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
    "fc00::/7",
    "fe80::/10",
    "::1/128",
]


@st.composite
def non_public_addresses(draw: st.DrawFn) -> str:
    network = ipaddress.ip_network(draw(st.sampled_from(_NON_PUBLIC)))
    offset = draw(st.integers(min_value=0, max_value=network.num_addresses - 1))
    address = network.network_address + offset
    if isinstance(address, ipaddress.IPv4Address) and draw(st.booleans()):
        return f"::ffff:{address}"  # the same address, IPv4-mapped
    return str(address)


@given(non_public_addresses(), st.sampled_from(["*", "*.example.com", "metadata", "localhost"]))
@example("169.254.169.254", "*")
@example("::ffff:127.0.0.1", "*")
def test_a_wildcard_or_a_name_never_dials_a_non_public_address(address: str, host: str) -> None:
    rules = [EgressRule(host=host)]
    assert not decide_address(rules, "whatever.example.com", address).allowed
