"""Where the daemon's log lines go and what they carry (config ``logging``).

Every module keeps logging through the standard library (``logging.getLogger(__name__)``);
structlog's ``ProcessorFormatter`` on the root handler renders those records, so nothing
had to be rewritten, and code that prefers structlog's API (``structlog.get_logger()``)
goes through the same handler. What structlog adds is context: the scheduler binds
``task_id`` and ``conversation_id`` (``structlog.contextvars``) while a task runs, and every
line logged meanwhile, by any module, in that task or the asyncio tasks it starts, carries
them.

``console`` (the default) keeps the familiar one-line shape,
``2026-11-26 03:20:34,123 INFO gateway_bot.core.conversations.queue: message [task_id=... ...]``;
``json`` writes one JSON object per line (``timestamp`` in UTC ISO 8601, ``level``,
``logger``, ``event``, the bound ids, ``exception`` with the traceback) for a log
collector.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

LogFormat = Literal["console", "json"]


def configure_logging(log_format: LogFormat, level: int, stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one that renders ``log_format`` to
    ``stream`` (stderr)."""
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
    ]
    if log_format == "json":
        shared.append(structlog.processors.TimeStamper(fmt="iso", utc=True))
        renderer: Processor = structlog.processors.JSONRenderer()
    else:
        shared.append(_console_time)
        renderer = _render_console
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _console_time(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """The stdlib's ``asctime`` shape (local time, milliseconds after a comma)."""
    record = event_dict.get("_record")
    created = record.created if isinstance(record, logging.LogRecord) else time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))
    event_dict["timestamp"] = f"{stamp},{int(created * 1000) % 1000:03d}"
    return event_dict


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""Characters that would end a log line, or move or recolour what a terminal shows."""


def _escaped(text: object) -> str:
    """``text`` with each unprintable character as its Python escape (``\\n``, ``\\x1b``):
    log lines quote what the agent and the repo chose (file names, refs, rules, git's own
    messages about them), and a line break there wrote a line of its own to the log."""
    return _UNPRINTABLE.sub(lambda found: found[0].encode("unicode_escape").decode(), str(text))


def _render_console(_: WrappedLogger, __: str, event_dict: EventDict) -> str:
    fields: dict[str, Any] = dict(event_dict)
    stamp = fields.pop("timestamp", "")
    level = str(fields.pop("level", "")).upper()
    name = fields.pop("logger", "")
    event = fields.pop("event", "")
    exception = fields.pop("exception", None)
    line = f"{stamp} {level} {name}: {_escaped(event)}"
    if fields:
        shown = (f"{key}={_escaped(value)}" for key, value in sorted(fields.items()))
        line += " [" + " ".join(shown) + "]"
    if exception:  # a traceback keeps its lines
        line += "\n" + "\n".join(map(_escaped, str(exception).split("\n")))
    return line
