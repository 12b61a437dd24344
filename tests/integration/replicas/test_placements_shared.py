"""Replicas on one ``state_dir`` share the podman sandbox's placements file (which context's
container lives on which host). Each replica's sandbox loads it at start and then places,
takes over and collects contexts of its own: every change must be made to what the file
holds then, and a context this replica has not seen placed must be looked up there. Before,
a replica wrote its own copy: placing one context dropped those another replica had placed
since, and a replica taking such a conversation over placed it again, on another host,
away from its container and files."""

from __future__ import annotations

import json
from pathlib import Path

from gateway_bot.config.sandbox import SandboxSettings
from gateway_bot.sandbox.podman.host_set import HostSet
from gateway_bot.sandbox.podman.hosts import Placements, make_hosts


def _on_disk(path: Path) -> dict[str, str]:
    placed: dict[str, str] = json.loads(path.read_text())["contexts"]
    return placed


def _replica(work_dir: Path) -> HostSet:
    """One replica's view of two configured hosts (nothing is dialled to make it)."""
    settings = SandboxSettings.model_validate(
        {
            "kind": "podman",
            "podman": {
                "hosts": [
                    {"name": "alpha", "url": f"unix://{work_dir}/alpha.sock"},
                    {"name": "beta", "url": f"unix://{work_dir}/beta.sock"},
                ]
            },
        }
    )
    hosts = make_hosts(settings, work_dir, "test", {})
    made = HostSet(hosts, work_dir / "placement.json")
    made.placements.load()
    return made


async def test_each_replicas_placements_are_kept_in_the_shared_file(tmp_path: Path) -> None:
    path = tmp_path / "placement.json"
    first, second = Placements(path), Placements(path)
    first.load()
    second.load()  # both started before anything was placed
    await first.set("conv-a", "alpha")
    await second.set("conv-b", "beta")
    await first.set("conv-c", "beta")
    assert _on_disk(path) == {"conv-a": "alpha", "conv-b": "beta", "conv-c": "beta"}
    # A context collected by the other replica loses its placement, also when this one
    # never saw it placed.
    await second.drop("conv-a")
    assert _on_disk(path) == {"conv-b": "beta", "conv-c": "beta"}


async def test_a_replica_taking_a_conversation_over_finds_the_host_another_placed_it_on(
    tmp_path: Path,
) -> None:
    first, second = _replica(tmp_path), _replica(tmp_path)
    await first.placements.set("conv-a", "beta")  # after the second replica loaded the file
    host = await second.located("conv-a")
    assert host is not None
    assert host.name == "beta"
    assert await second.located("conv-never-placed") is None
