"""Where a conversation's work lands, and /diff: the agent's changes not on origin yet.

What changed is the sandbox's to read (``ContextFiles.workspace_changes``: the workspace is
the agent's, and lives where its environment does; on this machine it is read no-follow
into a scratch repository, ``sandbox/workspace_changes.py``). Here the answer is shaped for
chat: inline when short, ``diff.patch`` in the task's sent/ directory when long.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from pathlib import Path

from gateway_bot.core.workspaces.directories import Workspaces
from gateway_bot.domain.messages import Reply
from gateway_bot.sandbox.base import Sandbox
from gateway_bot.sandbox.context_files import DiffBase
from gateway_bot.sandbox.scratch_git import ScratchGitError
from gateway_bot.sandbox.workspace_snapshot import DIR_FLAGS, WorkspaceUnreadable

DIFF_TIMEOUT_S = 120.0
INLINE_CHARS = 2500
"""A diff up to this long is shown in the message; a longer one is attached as a file."""


class WorkspaceReports:
    """The answers about a conversation's workspace: where it is, and what changed there."""

    def __init__(self, workspaces: Workspaces, sandbox: Sandbox) -> None:
        self._workspaces = workspaces
        self._sandbox = sandbox

    async def location(self, conversation_id: str) -> str:
        """One line: the workspace's host path and, when it differs, the agent's view."""
        context = self._workspaces.execution_context(conversation_id)
        inside = self._sandbox.paths(context).workspace
        text = f"Workspace (a clone of the repo): {context.workspace}"
        if inside != str(context.workspace):
            text += f", {inside} inside the agent's container"
        cloned = await self._sandbox.files(context).workspace_exists()
        return text + ("" if cloned else " (cloned at the first message)")

    async def diff(self, conversation_id: str, task_id: str) -> Reply:
        """The /diff answer; a long diff goes along as ``diff.patch`` in the task's sent/."""
        dirs = self._workspaces.dirs(conversation_id)
        where = await self.location(conversation_id)
        files = self._sandbox.files(self._workspaces.execution_context(conversation_id))
        upstream = await self._workspaces.upstream_branch()
        branch, commit = upstream or ("the default branch", None)
        scratch = dirs.root / f".diff-{secrets.token_hex(4)}"
        base = DiffBase(branch, commit, self._workspaces.mirror, scratch)
        try:
            changes = await asyncio.wait_for(files.workspace_changes(base), DIFF_TIMEOUT_S)
        except WorkspaceUnreadable as exc:
            return Reply(text=f"{where}\n{exc}")
        except ScratchGitError as exc:
            return Reply(text=f"{where}\nThe workspace could not be compared: {exc}")
        except TimeoutError:
            text = f"{where}\nReading the workspace took over {DIFF_TIMEOUT_S:.0f} s."
            return Reply(text=text, is_error=True)
        text = f"{where}\n{changes.summary}"
        patch = changes.patch
        if not patch:
            return Reply(text=text)
        if len(patch) <= INLINE_CHARS:
            # Longer than any run of backticks in the patch: the agent's text cannot end
            # the code block and have the rest rendered as the bot's own words.
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", patch)), default=0))
            return Reply(text=f"{text}\n\n{fence}diff\n{patch.rstrip()}\n{fence}")
        sent = await asyncio.to_thread(_write_patch, dirs.sent / task_id, patch)
        lines = patch.count("\n")
        text += f"\n\nThe whole diff ({lines:,} lines) is attached as {sent.name}."
        return Reply(text=text, files=(str(sent),))


def _write_patch(directory: Path, patch: str) -> Path:
    """``diff.patch`` in the task's sent/ directory (daemon-only), never through a link."""
    directory.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(directory, DIR_FLAGS)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open("diff.patch", flags, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(patch)
    finally:
        os.close(dir_fd)
    return directory / "diff.patch"
