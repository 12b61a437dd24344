"""Append-only log of a conversation's raw agent stream (events.jsonl).

Lives beside the workspace, never inside it, so the agent cannot read or rewrite its own
history. One writer: the task running in that conversation (one task at a time).
A blank line separates the runs of two tasks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path


class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def append(self, line: str) -> None:
        await asyncio.to_thread(self._append, line.rstrip("\n") + "\n")

    async def end_run(self) -> None:
        await asyncio.to_thread(self._append, "\n")

    def _append(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
