"""Who sent a mail, and whether we may believe it: pure functions over the parsed message.

A From header is whatever the sender typed; only the receiving MX's DMARC verdict ties it
to the domain. So the sender counts only when:

- exactly one From header holding exactly one mailbox (a second From, a group, or a
  display name dressed as an address never changes who the sender is: the address is the
  addr-spec inside the angle brackets);
- the TOPMOST Authentication-Results header carries the configured authserv-id exactly (a
  header an attacker wrote sits below the MX's, which is prepended last; a look-alike id
  such as ``mx.example.test.evil`` is another id);
- no other header claims that id (ambiguous: an MX that writes one header per milter is
  allowed explicitly, and must strip incoming ones, RFC 8601 section 5);
- ``dmarc=pass`` is a result of that header as parsed by ``authres`` (text in a comment is
  not a result) and its ``header.from`` equals the From domain, case-insensitively.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage

import authres
import authres.dmarc

_PARSER = authres.FeatureContext(authres.dmarc)
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
"""RFC 5322 dot-atom, ASCII: an address that needs quoting is not one we answer."""
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*")


class Refused(Exception):
    """The mail does not prove who sent it; ``reason`` is for the log, never for a reply."""

    def __init__(self, sender: str, reason: str) -> None:
        super().__init__(f"{sender}: {reason}")
        self.sender = sender
        self.reason = reason


@dataclass(frozen=True)
class Sender:
    address: str
    """Lower-cased addr-spec."""
    name: str

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2]


def single_sender(message: EmailMessage) -> Sender:
    """The one mailbox in the one From header, or Refused."""
    headers = message.get_all("From") or []
    if len(headers) != 1:
        raise Refused("unknown", f"{len(headers)} From headers (exactly one is required)")
    header = headers[0]
    addresses: tuple[Address, ...] = getattr(header, "addresses", ())
    groups = getattr(header, "groups", ())
    if len(addresses) != 1 or any(group.display_name is not None for group in groups):
        raise Refused(str(header), "From must hold exactly one mailbox")
    if getattr(header, "defects", ()):
        raise Refused(str(header), "From header is malformed")
    address = addresses[0]
    if not _DOT_ATOM.fullmatch(address.username) or not _DOMAIN.fullmatch(address.domain):
        # A quoted local part ("boss@victim.test"@evil.test) reads as another address once
        # unquoted: in the allowlist, on an approval card, in RCPT TO.
        raise Refused(str(header), "From holds no usable address")
    addr_spec = f"{address.username}@{address.domain}".lower()
    # The name titles approval cards: no control or bidi characters (an override shows
    # text reversed), and a name dressed as an address, a full-width one included, is
    # replaced by the address.
    name = "".join(
        char for char in address.display_name if unicodedata.category(char) not in ("Cc", "Cf")
    )
    name = " ".join(name.split())
    if not name or "@" in unicodedata.normalize("NFKC", name):
        name = addr_spec
    return Sender(addr_spec, name)


def check_dmarc(
    message: EmailMessage, sender: Sender, trusted_id: str, allow_multiple: bool = False
) -> None:
    """Raise Refused unless the MX's topmost Authentication-Results says DMARC passed for
    the From domain (see the module's rules)."""
    values = [str(value) for value in message.get_all("Authentication-Results") or []]
    if not values:
        raise Refused(sender.address, "no Authentication-Results header")
    parsed = [_parse(value) for value in values]
    top = parsed[0]
    if top is None or top.authserv_id != trusted_id:
        seen = "unparseable" if top is None else repr(top.authserv_id)
        raise Refused(sender.address, f"topmost Authentication-Results is from {seen}")
    claiming = [
        header for header in parsed if header is not None and header.authserv_id == trusted_id
    ]
    unparsed_claims = [
        value
        for value, header in zip(values, parsed, strict=True)
        if header is None and trusted_id in value
    ]
    if (len(claiming) > 1 or unparsed_claims) and not allow_multiple:
        raise Refused(sender.address, f"several Authentication-Results headers claim {trusted_id}")
    verdicts = [result for result in top.results if result.method == "dmarc"]
    if not verdicts or any(result.result != "pass" for result in verdicts):
        # one header with a pass and a fail is a contradiction, not a pass
        found = [f"{r.method}={r.result}" for r in top.results] or ["none"]
        raise Refused(sender.address, f"no dmarc=pass from {trusted_id} ({', '.join(found)})")
    domains = {str(getattr(result, "header_from", "") or "").lower() for result in verdicts}
    if domains != {sender.domain}:
        raise Refused(
            sender.address, f"dmarc=pass is for {sorted(domains)}, not From's {sender.domain}"
        )


def check_not_automatic(message: EmailMessage, sender: Sender, own_address: str) -> None:
    """Never answer a machine (RFC 3834): auto-replies, bounces and our own mail would
    otherwise start a loop of answers."""
    automatic = " ".join(str(message.get("Auto-Submitted") or "no").split()).lower()
    if automatic.split(";")[0] != "no":
        raise Refused(sender.address, f"automatic mail (Auto-Submitted: {automatic})")
    if sender.address == own_address.lower():
        raise Refused(sender.address, "mail from the bot's own address")


def _parse(value: str) -> authres.AuthenticationResultsHeader | None:
    try:
        return _PARSER.parse_value(" ".join(value.split()))
    except authres.AuthResError:
        return None


def is_allowed(address: str, allowed: list[str]) -> bool:
    """Exact address or ``*@domain`` (never a suffix: ``*@example.test`` does not admit
    ``evil-example.test`` nor ``sub.example.test``)."""
    address = address.lower()
    domain = address.rpartition("@")[2]
    return address in allowed or f"*@{domain}" in allowed
