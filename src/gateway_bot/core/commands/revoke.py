"""``/revoke``: an owner takes back the approvals a sender was given, in one room or all.

Kept apart from the gate (``core/admission/gate.py``): it reads and removes memberships and
answers, and has nothing to do with cards or held messages.
"""

from __future__ import annotations

import logging

from gateway_bot.config.access import AccessSettings
from gateway_bot.core.admission.cards import room_label
from gateway_bot.core.commands.parse import command_words
from gateway_bot.state.store import ApprovalStore

log = logging.getLogger(__name__)

_EVERYWHERE = ("everywhere", "all")
_REVOKE_USAGE = (
    "Usage: /revoke USER [everywhere | ROOM]: takes back USER's approval in this room "
    "(or in ROOM, or in every room); their next message needs an owner's approval again."
)


async def revoke_approval(
    approvals: ApprovalStore,
    access: AccessSettings,
    channel: str,
    revoker_id: str,
    here: str,
    argument: str,
) -> str:
    """``/revoke USER [everywhere | ROOM]``: owners take back an approval, in the room the
    command was typed in unless told otherwise. Returns the answer."""
    if revoker_id not in access.owners.get(channel, ()):
        log.warning("ignored /revoke by %s (%s): not an owner", revoker_id, channel)
        return "Only an owner of this bot can revoke approvals."
    words = command_words(argument)  # '/revoke "Jane Doe"' names one person
    if not 1 <= len(words) <= 2:
        return _REVOKE_USAGE
    # As typed, or as a chat client renders a mention of it (Slack: <@U1> -> @U1).
    user, rooms = words[0], []
    bare = words[0].strip("<>")
    for candidate in dict.fromkeys((words[0], bare, bare.lstrip("@"))):
        rooms = await approvals.member_rooms(channel, candidate)
        if rooms:
            user = candidate
            break
    scope = words[1] if len(words) == 2 else here
    everywhere = scope.lower() in _EVERYWHERE
    removed = rooms if everywhere else [r for r in rooms if r[0] == scope]
    labels = ", ".join(room_label(title, room) for room, title in rooms)
    if not removed:
        if rooms:
            return (
                f"{user} has no approval in {scope or 'this conversation'}; they are "
                f"approved in {labels}. /revoke {user} everywhere takes back all of them."
            )
        return (
            f"{user} has no approval to revoke on {channel}. (Senders listed in a "
            "channel's allowed_users are allowed by the configuration, not by approval.)"
        )
    await approvals.remove_member(channel, user, None if everywhere else scope)
    log.info("%s revoked %s's approval in %s", revoker_id, user, removed)
    taken = ", ".join(room_label(title, room) for room, title in removed)
    return (
        f"Revoked {user}'s approval in {taken}. Their next message to the bot there "
        "goes to an owner for approval again."
    )
