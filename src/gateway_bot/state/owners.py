"""The owners of tables in the state database that live below the channels, with their
migrations: the core's store first, then each optional store. The channels' owners are
listed by ``channels/factory.py`` (``channel_owners``); ``gateway-bot migrate`` and
``state copy`` take both lists."""

from __future__ import annotations

from collections.abc import Sequence

from gateway_bot.state import action_approvals_store as actions
from gateway_bot.state import leases_store as ha
from gateway_bot.state import migrations as core
from gateway_bot.state import schedule_proposals_store as proposals
from gateway_bot.state import schedules_store as schedules
from gateway_bot.state.database import Migration


def state_owners() -> dict[str, Sequence[Migration]]:
    return {
        core.OWNER: core.MIGRATIONS,
        schedules.OWNER: schedules.MIGRATIONS,
        proposals.OWNER: proposals.MIGRATIONS,
        actions.OWNER: actions.MIGRATIONS,
        ha.OWNER: ha.HA_MIGRATIONS,
    }
