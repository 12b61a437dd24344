"""The working tree as a ``git fast-import`` stream, so /diff can compare it with HEAD in a
scratch repository without running git in the agent's workspace (``workspace_changes``).
Files are read by ``workspace_snapshot.WorkTree`` (no-follow, bounded).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from gateway_bot.sandbox.workspace_snapshot import WorkTree, given_up


def worktree_import_stream(
    work_fd: int,
    tracked: dict[bytes, tuple[str, str, int]],
    untracked: Iterable[bytes],
    object_format: str,
    *,
    max_file: int,
    max_total: int,
    stop: threading.Event | None = None,
) -> bytes:
    """A ``git fast-import`` stream committing the working tree as ``refs/gwb/worktree``.

    ``tracked`` is HEAD's tree (path -> mode, id, size). Files unchanged from HEAD go in by
    reference (hashed here, never re-sent), changed and new ones inline, read by WorkTree.
    A changed file over ``max_file`` (or past ``max_total`` in all) becomes a one-line note.
    Submodules stay as HEAD has them: their own repositories are not read. Raises
    WorkspaceUnreadable soon after ``stop`` is set.
    """
    out = [b"commit refs/gwb/worktree\ncommitter gateway-bot <gateway-bot@localhost> 0 +0000\n"]
    out.append(b"data 0\n")
    budget = max_total
    stop = stop or threading.Event()
    tree = WorkTree(work_fd, object_format, stop)
    try:
        for path in sorted({*tracked, *untracked}):
            given_up(stop)
            known = tracked.get(path)
            if known is not None and known[0] == "160000":
                out.append(b"M 160000 %s %s\n" % (known[1].encode(), _quote(path)))
                continue
            state = tree.state(path, min(max_file, budget), known[2] if known else -1)
            if not state.mode:
                continue  # gone (deleted), or not a file or link
            if known is not None and state.object_id == known[1]:
                out.append(b"M %s %s %s\n" % (state.mode.encode(), known[1].encode(), _quote(path)))
                continue
            content = state.content
            if content is None:
                content = b"[gateway-bot: %d bytes, too large to show here]\n" % state.size
            budget = max(0, budget - len(content))
            out.append(b"M %s inline %s\n" % (state.mode.encode(), _quote(path)))
            out.append(b"data %d\n%s\n" % (len(content), content))
    finally:
        tree.close()
    return b"".join(out)


def _quote(path: bytes) -> bytes:
    """A C-style quoted path, as fast-import reads it whatever the name holds."""
    quoted = bytearray(b'"')
    for byte in path:
        if byte in (0x22, 0x5C):
            quoted += b"\\" + bytes([byte])
        elif byte < 0x20 or byte >= 0x7F:
            quoted += b"\\%03o" % byte
        else:
            quoted.append(byte)
    return bytes(quoted + b'"')
