"""A request the egress proxy holds until someone decides, and the seam the daemon answers it
through.

The sandbox knows nothing of chat: it hands the daemon a ``HeldRequest`` (whose context id is
the opaque execution-context id) and awaits a yes or no. Whoever sets the ``EgressAsk`` turns
that into a card in the right conversation (``core``); the sandbox only enforces the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway_bot.sandbox.egress.git_push import RefUpdate
from gateway_bot.sandbox.egress.target import AmbiguousTarget, read_origin_form


@dataclass(frozen=True)
class HeldRequest:
    """One request waiting at the proxy. ``id`` is random and single-use: the decision for it
    goes back on the one connection that holds it, so it can never be applied to another
    request (a proxy or daemon restart ends that connection, and the request is refused)."""

    id: str
    context_id: str
    method: str
    scheme: str
    host: str
    port: int
    path: str
    """The normal form the proxy judged and forwarded (``target.read_target``), with its
    query."""
    rule: str
    """The ask rule that held it (``EgressRule.describe``)."""
    refs: tuple[RefUpdate, ...] = ()
    """For a git push: the refs it changes (empty for other requests, or when unreadable)."""
    commit_subjects: tuple[str, ...] = ()
    commits_complete: bool = False
    """``commit_subjects`` lists every pushed commit (else only the first few)."""
    body_size: int = 0
    refs_complete: bool = False
    """``refs`` is every ref the push changes (else the card says there may be more)."""

    @property
    def is_git_push(self) -> bool:
        try:
            path, _ = read_origin_form(self.path)
        except AmbiguousTarget:
            return False  # parse_ask refuses such a path: never held
        return path.endswith("/git-receive-pack")

    @property
    def url(self) -> str:
        default = {"http": 80, "https": 443}.get(self.scheme)
        authority = self.host if self.port == default else f"{self.host}:{self.port}"
        return f"{self.scheme}://{authority}{self.path}"

    def describe(self) -> str:
        """Plain text of what would happen if allowed: for a card or a log."""
        lines = [f"{self.method} {self.url}"]
        if self.is_git_push:
            lines[0] = f"git push to {self.url.rsplit('/git-receive-pack', 1)[0]}"
            if self.refs and not self.refs_complete:  # first: a long card is cut at the end
                lines.append("  and refs that could not be read: it may change more than these")
            lines += [f"  {ref.describe()}" for ref in self.refs] or ["  (refs not readable)"]
            if self.commit_subjects:
                more = "" if self.commits_complete else " (at least)"
                lines.append(f"  {len(self.commit_subjects)} commit(s){more}:")
                lines += [f"    {subject}" for subject in self.commit_subjects]
        lines.append(f"held by egress rule: {self.rule}")
        return "\n".join(lines)


EgressDecision = bool | tuple[bool, str]
"""Allow or not, with an optional reason (shown to the client on a refusal)."""

EgressAsk = Callable[[HeldRequest], Awaitable[EgressDecision]]
"""Asked once per held request. It may take as long as it likes: the sandbox refuses the
request after ``sandbox.egress_approvals.timeout_s`` and cancels the call (as it does when the
proxy drops the request), so an implementation withdraws its card on ``CancelledError``."""
