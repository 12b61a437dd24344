"""What a turn costs with a warm session: each turn's own share, not the kept process's
running total (which Claude Code reports in every result), in the reply, the store, the
budget and the task's timeline.

The real CLI against the fake API, every model request reporting the same usage: each turn
is two requests (the tool call, then the answer), so each costs the same.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gateway_bot.state.sql_store import SqlStore
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic

INPUT_TOKENS, OUTPUT_TOKENS = 10_000, 1_000
TURN_COST = 2 * (INPUT_TOKENS * 5 + OUTPUT_TOKENS * 25) / 1_000_000
"""Two requests at the pinned CLI's default model's prices ($5 and $25 a million tokens)."""


def recorded_costs(state_dir: Path) -> list[float]:
    async def read() -> list[float]:
        store = SqlStore(state_dir / "state.db")
        await store.open()
        try:
            tasks = await store.list_tasks(limit=100)
        finally:
            await store.close()
        return [task.cost_usd for task in sorted(tasks, key=lambda t: t.created_at)]

    return asyncio.run(read())


def results_logged(state_dir: Path) -> list[dict[str, object]]:
    (log,) = state_dir.rglob("events.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("type") == "result"]


def test_four_warm_turns_each_show_and_record_their_own_cost_and_the_budget_holds(
    gateway, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    fake_api.fixed_usage(INPUT_TOKENS, OUTPUT_TOKENS)
    # Four turns cost 4 x $0.15 = $0.60. Counted as running totals they would be $1.50,
    # and the third turn would already ask to go past the budget ($0.45 + $0.30 > $0.65).
    agent = {"max_warm_sessions": 4, "budget_usd": 0.65}
    config = write_config(tmp_path, target_repo, fake_api, agent=agent)
    chat = gateway("chat", "--config", str(config))
    shown = []
    for turn in ("first", "second", "third", "fourth"):
        chat.send(f"the {turn} question")
        chat.expect(rf"^agent> Echo: the {turn} question$")
        shown.append(chat.expect(r"^  \[\$\d+\.\d{4} · "))
    chat.finish()

    each_turn = f"  [${TURN_COST:.4f} · 2 turns · "
    assert all(line.startswith(each_turn) for line in shown), shown
    assert chat.count("budget") == 0, "no turn asked to go past the budget"
    assert chat.count(r"^error> ") == 0
    results = results_logged(tmp_path / "state")
    assert len(results) == 4
    assert {r["session_id"] for r in results} == {results[0]["session_id"]}, "one session"
    lifetime = results[-1]["gateway_bot_process_cost_usd"]
    assert lifetime == pytest.approx(4 * TURN_COST), "the CLI's own total for the process"
    assert recorded_costs(tmp_path / "state") == pytest.approx([TURN_COST] * 4)
    assert sum(recorded_costs(tmp_path / "state")) == pytest.approx(lifetime)
    assert [r["total_cost_usd"] for r in results] == pytest.approx([TURN_COST] * 4), (
        "the timeline reads each turn's own cost from the log"
    )
