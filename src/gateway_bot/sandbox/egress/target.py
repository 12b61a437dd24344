"""One reading of an HTTP request target: the egress proxy's and the daemon's.

The proxy decides on a request by its target (host, port, path), and the server behind it
routes the same request by its own reading of that target. Where the two readings differ, a
rule can be passed by a spelling the server routes elsewhere (``/repo.git/git-receive-pack#x``
is a push to the forge, and was not one to the rule matcher). So each target is read once,
here, by yarl (aiohttp's URL parser), into a ``RequestTarget``:

- What RFC 9112 does not allow in a request target, or what servers read in different ways,
  is refused (``AmbiguousTarget``, a 400 with the reason): a fragment, characters that
  would need percent-encoding (backslash, space, control and non-ASCII bytes), a malformed
  ``%``, dot segments (``.``, ``..``, also encoded), a target that is neither origin-form
  nor ``*``, a Host header naming another origin than the target, and IPv4 addresses in
  the numeric forms resolvers accept (``2130706433``, ``0177.0.0.1``, ``127.1``).
- What every server reads alike is normalised once: percent-encoded unreserved characters
  decoded (``%67it`` is ``git``), escapes in upper case, host names in lower case without
  a trailing dot, IDNA names as ASCII, IPv6 compressed and IPv4-mapped IPv6 as IPv4, the
  method in upper case. The proxy forwards this normal form, so the server gets what was
  judged, and logs it.
- What some servers still read differently after that is kept as ``readings``: the path as
  most servers route it, and as a server that decodes again and takes ``%2F``/``%5C``/``%3F``
  /``%23`` as structure, one that drops ``;parameters`` (servlet containers), one that merges
  empty segments and ignores a trailing slash, one that ignores case (IIS). ``rules.judge``
  refuses a request whose readings get different verdicts.

Standard library and yarl only: the proxy image carries this package beside its addon.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import unquote

from yarl import URL

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
MAX_TARGET = 8192
_TARGET_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*\Z")
"""RFC 3986 pchar, ``/`` and ``?``: everything else must be percent-encoded by the client."""
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_METHOD = re.compile(r"[A-Z][A-Z0-9!#$%&'*+.^_`|~-]{0,31}\Z")
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)\Z")
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*\Z")
_MAX_DECODINGS = 3


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""A control character a path decodes to: C servers end the path at a NUL, others keep it."""


class AmbiguousTarget(ValueError):
    """A request target servers may read in more than one way, or that HTTP does not allow:
    refused with a 400 and this reason (one line)."""


@dataclass(frozen=True)
class PathReading:
    """One way a server routes the path: ``path`` as it sees it, matched in any case when
    ``any_case``."""

    path: str
    any_case: bool = False


@dataclass(frozen=True)
class RequestTarget:
    method: str
    scheme: str
    host: str
    port: int
    path: str
    """Normalised and still percent-encoded (``/a%2Fb``): what the proxy forwards."""
    query: str
    """As sent, without its ``?`` (a query is never matched by rules)."""
    readings: tuple[PathReading, ...]

    @property
    def origin_form(self) -> str:
        return f"{self.path}?{self.query}" if self.query else self.path

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The normal form, for the network log and a card."""
        if self.path == "*":
            return f"{self.scheme}://{self.authority} *"
        return f"{self.scheme}://{self.authority}{self.origin_form}"


def read_target(
    method: str,
    target: str,
    *,
    scheme: str,
    host: str,
    port: int,
    host_header: str | None = None,
    server_name: str | None = None,
) -> RequestTarget:
    """Read one request: ``target`` is the origin-form target as sent (path, query and any
    fragment; for an absolute-form request, what follows its authority), ``host``/``port``
    where the request goes (the absolute-form authority or the tunnel's), ``host_header``
    the Host header (or HTTP/2 ``:authority``), ``server_name`` the TLS SNI inside a
    tunnel. Raises AmbiguousTarget."""
    if not _METHOD.match(method.upper()):
        raise AmbiguousTarget(f"the method {method[:40]!r} is not an HTTP method token")
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise AmbiguousTarget(f"the scheme {scheme[:20]!r} is not HTTP")
    name = canonical_host(host)
    for other, what in ((host_header, "the Host header"), (server_name, "the TLS server name")):
        if other:
            _same_origin(other, name, port, scheme, what, with_port=what == "the Host header")
    path, query = _read_path(target)
    return RequestTarget(method.upper(), scheme, name, port, path, query, _readings(path))


def read_origin_form(target: str) -> tuple[str, str]:
    """(normal path, query) of an origin-form target; raises AmbiguousTarget. What the
    daemon checks a held request's path with (the proxy sends the normal form)."""
    return _read_path(target)


def canonical_host(host: str) -> str:
    """A host as rules match it: a lower-case ASCII name without its trailing dot, a
    dotted-quad IPv4 address, or a compressed IPv6 address (an IPv4-mapped one as IPv4).
    Raises AmbiguousTarget for the numeric IPv4 forms resolvers read as addresses, zone
    ids and anything that is not a host."""
    text = host.strip("[]") if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError as exc:
            raise AmbiguousTarget(f"{host[:80]!r} is not an IPv6 address") from exc
        if address.scope_id:
            raise AmbiguousTarget(f"{host[:80]!r} names a network interface (a zone id)")
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else address.compressed
    if not text.isascii():
        try:
            text = URL.build(scheme="http", host=text).raw_host or ""
        except (ValueError, UnicodeError) as exc:
            raise AmbiguousTarget(f"{host[:80]!r} is not a host name") from exc
    name = text.lower()
    name = name[:-1] if name.endswith(".") else name
    last = name.rsplit(".", 1)[-1]
    if _NUMERIC_LABEL.match(last):
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            raise AmbiguousTarget(
                f"{host[:80]!r} is an IPv4 address in a form resolvers read differently "
                "(write it as four decimal numbers)"
            ) from None
    if len(name) > 253 or not _HOST_NAME.match(name):
        raise AmbiguousTarget(f"{host[:80]!r} is not a host name")
    return name


def _same_origin(
    authority: str, host: str, port: int, scheme: str, what: str, *, with_port: bool
) -> None:
    try:
        parsed = URL(f"{scheme}://{authority}")
    except ValueError as exc:
        raise AmbiguousTarget(f"{what} {authority[:80]!r} is not a host") from exc
    if parsed.raw_path not in ("", "/") or parsed.raw_query_string or parsed.user:
        raise AmbiguousTarget(f"{what} {authority[:80]!r} is not a host")
    if canonical_host(parsed.raw_host or "") != host:
        raise AmbiguousTarget(
            f"{what} names {authority[:80]!r}, another host than the request's {host}"
        )
    if with_port and parsed.explicit_port is not None and parsed.explicit_port != port:
        raise AmbiguousTarget(f"{what} names port {parsed.explicit_port}, the request {port}")


def _read_path(target: str) -> tuple[str, str]:
    if target == "*":
        return "*", ""
    if len(target) > MAX_TARGET:
        raise AmbiguousTarget(f"the request target is longer than {MAX_TARGET} characters")
    if "#" in target:
        raise AmbiguousTarget("a fragment (#) in a request target (RFC 9112 allows none)")
    if not target.startswith("/"):
        raise AmbiguousTarget("the request target is not a path starting with /")
    if not _TARGET_CHARACTERS.match(target):
        raise AmbiguousTarget(
            "the request target holds characters that must be percent-encoded "
            "(backslash, space, quotes, control or non-ASCII)"
        )
    if _BAD_ESCAPE.search(target):
        raise AmbiguousTarget("a % in the request target that is not an escape (%XX)")
    raw_path = target.split("?", 1)[0]
    for segment in raw_path.split("/")[1:]:
        if _decoded(segment).split(";", 1)[0] in (".", ".."):
            raise AmbiguousTarget("dot segments (. or ..) in the request target")
    # Parsed after a fixed origin, so "//x/y" stays a path (not the authority "x"); split
    # as sent, then the path alone normalised (the query goes on as sent: signatures).
    sent = URL("http://origin.invalid" + target, encoded=True)
    return URL("http://origin.invalid" + sent.raw_path).raw_path, sent.raw_query_string


def _decoded(text: str) -> str:
    """``text`` percent-decoded until it stops changing (a server behind another may decode
    twice), at most a few times."""
    for _ in range(_MAX_DECODINGS):
        decoded = unquote(text, errors="surrogateescape")
        if decoded == text:
            break
        text = decoded
    return text


def _readings(path: str) -> tuple[PathReading, ...]:
    if path == "*":
        return (PathReading("*"),)
    structural = re.split(r"[?#]", _decoded(path).replace("\\", "/"), maxsplit=1)[0]
    if any(s.split(";", 1)[0] in (".", "..") for s in structural.split("/")):
        raise AmbiguousTarget("dot segments (. or ..) once the request target is decoded again")
    if _CONTROL.search(structural):
        raise AmbiguousTarget("an encoded control character in the request target's path")
    readings = [
        PathReading(path),
        PathReading(_without_parameters(path)),
        PathReading(_merged(path)),
        PathReading(path, any_case=True),
        PathReading(_merged(structural)),
        PathReading(_merged(_without_parameters(structural))),
    ]
    return tuple(dict.fromkeys(readings))


def _without_parameters(path: str) -> str:
    """``;parameters`` dropped from every segment (servlet containers: Gerrit, Bitbucket)."""
    return "/".join(segment.split(";", 1)[0] for segment in path.split("/"))


def _merged(path: str) -> str:
    """Empty segments merged and a trailing slash ignored (nginx's merge_slashes, routers
    that take /x/ for /x)."""
    return "/" + "/".join(segment for segment in path.split("/") if segment)
