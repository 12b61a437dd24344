"""The Matrix channel: rooms and threads as conversations, membership-based auth, live
progress by editing a message, files in and out.

One module per job: ``listener`` (sync, invites, exactly-once intake), ``adapter`` (what the
core calls), ``session`` (login), ``api`` (the HTTP calls), ``store`` (what survives a
restart), ``events`` (pure protocol logic), ``render`` (pure message formatting), ``files``
(downloads and uploads).
"""

from gateway_bot.channels.matrix.adapter import MatrixAdapter

__all__ = ["MatrixAdapter"]
