"""The Matrix channel: rooms and threads as conversations, membership-based auth, live
progress by editing a message, files in and out.

One module per job: ``listener`` (sync, invites, exactly-once intake), ``adapter`` (what the
core calls), ``inbound`` (the adapter's authentication and parsing: who may speak, what they
said), ``session`` (login, sends), ``api`` (the calls, over matrix-nio), ``store`` (what
survives a restart), ``events`` (pure protocol logic), ``render`` (pure message formatting),
``files`` (downloads and uploads, encrypted ones too); end-to-end encryption: ``crypto``
(nio's Olm machine: key chores, trust, decrypt/encrypt), ``encrypted_intake`` and
``undecrypted`` (messages whose keys have not arrived), ``cross_signing`` (recovery key,
secret storage, signing the bot's device).
"""

from gateway_bot.channels.matrix.adapter import MatrixAdapter

__all__ = ["MatrixAdapter"]
