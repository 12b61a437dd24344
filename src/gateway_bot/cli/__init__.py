"""Command line: ``gateway-bot VERB``. Each verb is a module of ``cli/commands/`` that
registers itself (``cli/registry.py``); the work of the heavier ones lives beside them in
``cli/`` and is imported only when that verb runs, so ``--help`` pays for no config model,
``status`` for no daemon, ``chat`` for no podman-py or dashboard. Exit codes:
``cli/exit_codes.py``.
"""

from __future__ import annotations

import sys

from gateway_bot.cli import commands as _commands  # noqa: F401  (registers every verb)
from gateway_bot.cli.registry import build_parser

USAGE = """\
Work with a coding agent (Claude Code) from chat: the console, Matrix, Slack or email,
each conversation in its own workspace and sandbox.

start here:
  gateway-bot chat                 talk to it in this terminal (built-in config: the git
                                   repo you are in, state in ~/.local/state/gateway-bot)
  gateway-bot check                what chat would run with, and what is missing
a server (copy examples/gateway-bot.yaml from the project and edit it):
  gateway-bot check --config FILE  validate it
  gateway-bot run --config FILE    serve every channel it enables

exit codes: 0 done, 2 the config or the set-up is wrong (nothing was started),
3 (status) no state at all for this config. More: README.md in the project."""


HELP_ORDER = (
    "chat", "run", "check", "status", "approvals", "approve", "deny",
    "install-service", "image", "matrix", "migrate", "state",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser(USAGE, HELP_ORDER).parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
