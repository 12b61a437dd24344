"""Which thread a mail belongs to.

A mail joins a thread by In-Reply-To, then References newest first, then the
``[ID:xxxxxxxx]`` subject tag; otherwise it starts one. Our Message-IDs
(``<gwb.{thread}.{ts}@domain>``) and subject tags carry the thread's key, but anyone can
write them: a key is taken only if that thread exists (it has an owner in the store).
A well-formed key that never existed names nothing, and the mail starts a conversation of
its own under a new key, rather than opening one under the key its sender chose.
"""

from __future__ import annotations

import hashlib
from email.message import EmailMessage

from gateway_bot.channels.email import mime
from gateway_bot.channels.email.store import EmailStore


async def thread_for(store: EmailStore, message: EmailMessage, own_id: str, key: str) -> str:
    """The mail's thread. A mail parsed again (a retry, a restart) keeps the thread it was
    given; a new thread's key comes from the mail's bytes, so it is the same every time."""
    return (
        await store.thread_of(own_id)
        or await _known_thread(store, message)
        or hashlib.sha256(key.encode()).hexdigest()[:8]
    )


async def _known_thread(store: EmailStore, message: EmailMessage) -> str | None:
    for msgid in mime.references_newest_first(message):
        known = await store.thread_of(msgid)
        if known is not None:
            return known
        ours = mime.thread_of_our_id(msgid)
        if ours is not None and ours.isalnum() and await store.thread_owner(ours) is not None:
            return ours
    tagged = mime.subject_tag(str(message.get("Subject") or ""))
    if tagged is not None and await store.thread_owner(tagged) is not None:
        return tagged
    return None
