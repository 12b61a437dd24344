"""The commands of ``gateway-bot``: each command module registers itself here at import.

A command is its name, its one-line help, a function adding its arguments and a function
running it. Registration imports nothing heavy: a command's implementation imports what it
uses when it runs, so ``--help`` pays for no config model and ``status`` for no daemon
(AGENTS.md, Conventions: heavy libraries are imported where the configuration needs them).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

AddArguments = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: AddArguments
    run: Run


COMMANDS: dict[str, Command] = {}
"""Registered commands by name."""


def register(name: str, help: str, add_arguments: AddArguments, run: Run) -> None:
    if name in COMMANDS:
        raise ValueError(f"gateway-bot {name} is registered twice")
    COMMANDS[name] = Command(name, help, add_arguments, run)


def build_parser(description: str, order: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The parser of every registered verb; ``order`` first (as ``--help`` lists them), then
    the others by name."""
    parser = argparse.ArgumentParser(
        prog="gateway-bot",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="command", required=True)
    ranked = sorted(COMMANDS.values(), key=lambda c: (c.name not in order, _rank(order, c.name)))
    for command in ranked:
        sub = verbs.add_parser(command.name, help=command.help)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def _rank(order: tuple[str, ...], name: str) -> tuple[int, str]:
    return (order.index(name), name) if name in order else (len(order), name)
