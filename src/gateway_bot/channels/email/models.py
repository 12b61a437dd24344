"""Which model a ``bot+NAME@domain`` subaddress asks for.

Anyone can write any subaddress, and a name the agent CLI does not know fails the whole
run (or, worse, names a costlier model than the operator meant to offer). So only these are
taken: the models the server config names (``agent.model``, ``agent.backends.*.model``),
the short names the enabled agent CLIs document (``opus``, ``sonnet``, ``haiku`` for Claude
Code; ``pro``, ``flash``, ``flash-lite`` for Gemini CLI), and the aliases the email channel
configures (``model_aliases: {fast: claude-haiku-4-5}``). Anything else runs on the default
model, and the reply says so in one line.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway_bot.config.agent import AgentSettings

CLI_ALIASES: dict[str, tuple[str, ...]] = {
    "claude-code": ("opus", "sonnet", "haiku"),
    "claude_code": ("opus", "sonnet", "haiku"),
    "gemini-cli": ("pro", "flash", "flash-lite"),
    "codex": (),
}


def subaddress_models(agent: AgentSettings, aliases: Mapping[str, str]) -> dict[str, str]:
    """Subaddress (lower case) -> the model name the agent CLI gets."""
    known: dict[str, str] = {}
    for backend in {agent.backend, *agent.enabled}:
        for alias in CLI_ALIASES.get(backend, ()):
            known[alias] = alias
    named = [agent.model, *(settings.model for settings in agent.backends.values())]
    for model in named:
        if model:
            known[model.lower()] = model
    for alias, model in aliases.items():
        known[alias.lower()] = model
    return known


def resolve(hint: str | None, known: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the model to ask for, or None for the default; a line for the reply, or None)."""
    if hint is None:
        return None, None
    model = known.get(hint.lower())
    if model is not None:
        return model, None
    offered = ", ".join(sorted(known)) or "none"
    return None, (
        f"{hint!r} (from the address you wrote to) is not a model I know, so the default "
        f"model answered. Known: {offered}"
    )
