"""The ages and one-line previews the operator's `status`/`approvals` tables, the dashboard
and the chat's /status show come from one module (``domain/display.py``): the same
function everywhere, and the texts they showed before the move."""

from __future__ import annotations

from gateway_bot.cli import status_format
from gateway_bot.dashboard import views
from gateway_bot.domain import display


def test_each_surface_shows_durations_as_it_did() -> None:
    # `gateway-bot status` / `approvals`: one rounded unit.
    shown = [status_format.age(s) for s in (-5, 0, 119, 120, 7199, 7200, 172799, 172800)]
    assert shown == ["0s", "0s", "119s", "2m", "120m", "2h", "48h", "2d"]
    # The dashboard: two floored units, "made ... ago" from a moment.
    assert [views.span(s) for s in (59, 60, 65, 3599, 3600, 3725)] == [
        "59s", "1m00s", "1m05s", "59m59s", "1h00m", "1h02m",
    ]  # fmt: skip
    assert views.age(None) == ""
    assert status_format.age is display.age, "one implementation"
    assert views.span is display.span


def test_a_preview_is_one_line_cut_where_its_surface_cuts() -> None:
    body = "first line\n\tsecond   line " + "x" * 200
    assert status_format.preview(body) == "first line second line " + "x" * 36 + "…"
    assert display.one_line(body, 120) == "first line second line " + "x" * 96 + "…"
    assert display.one_line("a\n b", 5) == "a b", "short: whole, on one line"


def test_control_and_bidi_characters_are_shown_as_escapes() -> None:
    """What the dashboard shows of a sender's or an agent's text: an override or an escape
    sequence as the characters it is, the rest (tab, newline, any script, emoji) as is."""
    assert display.visible("invoice\u202efdp.exe") == "invoice\\u202efdp.exe"
    assert display.visible("\x1b[2J\x07\x85\u2066x\u2069\u061c") == (
        "\\x1b[2J\\x07\\x85\\u2066x\\u2069\\u061c"
    )
    kept = "tab\tline\nÉtoile 中文 עברית 😀 ok"
    assert display.visible(kept) == kept
    assert not set("<>&\"'") & set(display.visible("".join(map(chr, range(0x20))))), "no markup"
