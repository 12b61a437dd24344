"""Replicas that fail over (``ha:``): several daemons with this config on one state database."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from gateway_bot.config.section import Section


class HaSettings(Section):
    enabled: bool = Field(
        default=False,
        description="Run as one of several replicas on the shared state database: each "
        "channel listener on one replica at a time under a lease, each conversation's tasks "
        "on one replica at a time, a dead replica's work taken over by the others.",
    )
    lease_seconds: PositiveFloat = Field(
        default=15.0,
        description="How long a listener lease or a replica's heartbeat lasts without "
        "renewal (renewed every third of it); a dead replica's listeners and tasks move "
        "within this time plus the listener's own start.",
    )
    poll_seconds: PositiveFloat = Field(
        default=0.5,
        description="How often a replica looks for conversations with waiting tasks that "
        "no replica runs (HA only; a single daemon never polls).",
    )
