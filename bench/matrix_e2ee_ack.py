"""Acknowledgement latency in an encrypted Matrix room vs a plain one, same run.

    uv run python -m bench.matrix_e2ee_ack [--runs 7]

One real Synapse (tests/synapse_fixtures.py), one real gateway-bot daemon (real ``claude``
against the fake model API), one person with two rooms: a plain one and an encrypted DM
created the way Element creates it. Their client is matrix-nio with its own crypto store,
so the encrypted side includes encrypting the message, the bot decrypting it, encrypting
its acknowledgement and the person decrypting that. Rooms alternate; each message's reply
is awaited before the next, so nothing queues. Latency = message sent -> acknowledgement
seen (decrypted) by the person's syncing client.

Prints medians and their ratio. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from tests.conftest import GatewayProcess, make_repo
from tests.fake_anthropic import FakeAnthropic
from tests.synapse_fixtures import (
    Human,
    SynapseServer,
    bot_text,
    matrix_config,
    membership,
    relation_of,
)


async def _ack_latency(person: Human, room: str, bot: str, text: str) -> float:
    started = time.perf_counter()
    asked = await person.say(room, text)
    await person.wait_for(
        room,
        lambda e: (
            bot_text(bot, r"^Working on it")(e)
            and relation_of(e).get("m.in_reply_to", {}).get("event_id") == asked
        ),
    )
    latency = time.perf_counter() - started
    await person.wait_for(room, bot_text(bot, rf"Echo: .*{text}"))
    return latency


async def _bench(runs: int, root: Path) -> None:
    server = SynapseServer(root / "synapse")
    server.start()
    api = FakeAnthropic()
    api.start()
    daemon: GatewayProcess | None = None
    try:
        alice = Human(server, await server.register("alice"), root / "alice-store")
        await alice.sync(0)
        bot = await server.register("bot")
        plain = await alice.create_room([bot.user_id], name="plain")
        encrypted = await alice.create_room([bot.user_id], encrypted=True, direct=True)
        config = matrix_config(
            root,
            make_repo(root / "repo"),
            api,
            server,
            bot,
            [alice.user_id],
            e2ee={"pickle_key": "bench-pickle-key"},
        )
        daemon = GatewayProcess("run", "--config", str(config))
        for room in (plain, encrypted):
            await alice.wait_for(room, membership(bot.user_id, "join"))
        # Warm-up: sessions shared, containers of nothing, caches filled.
        for room in (plain, encrypted):
            await _ack_latency(alice, room, bot.user_id, f"warmup-{room[-6:]}")
        timings: dict[str, list[float]] = {"plain": [], "encrypted": []}
        for run in range(runs):
            for name, room in (("plain", plain), ("encrypted", encrypted)):
                latency = await _ack_latency(alice, room, bot.user_id, f"bench-{name}-{run}")
                timings[name].append(latency)
        plain_ms = statistics.median(timings["plain"]) * 1000
        encrypted_ms = statistics.median(timings["encrypted"]) * 1000
        print(f"acknowledgement latency over {runs} runs (median, then every run in ms):")
        for name, median in (("plain", plain_ms), ("encrypted", encrypted_ms)):
            every = sorted(round(t * 1000) for t in timings[name])
            print(f"  {name + ' room:':16}{median:7.1f} ms  {every}")
        print(f"  ratio encrypted/plain: {encrypted_ms / plain_ms:.2f}")
        await alice.close()
    finally:
        if daemon is not None:
            daemon.process.terminate()
            daemon.process.wait(30)
        api.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gwb-bench-") as directory:
        asyncio.run(_bench(args.runs, Path(directory)))


if __name__ == "__main__":
    main()
