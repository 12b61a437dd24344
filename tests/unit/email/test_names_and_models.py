"""Attachment names keep the sender's letters and lose only what is unsafe; a +model
subaddress is taken only when it names a known model or a configured alias."""

from __future__ import annotations

import pytest

from gateway_bot.channels.email.models import resolve, subaddress_models
from gateway_bot.config.agent import AgentSettings
from gateway_bot.domain.filenames import safe_filename


@pytest.mark.parametrize(
    ("sent", "saved"),
    [
        ("Überweisung März.pdf", "Überweisung März.pdf"),
        ("U\u0308berweisung.pdf", "Überweisung.pdf"),  # a Mac's decomposed ü becomes one letter
        ("Résumé final (v2).docx", "Résumé final (v2).docx"),
        ("見積書.xlsx", "見積書.xlsx"),
        ("Παραγγελία.docx", "Παραγγελία.docx"),
        ("../../etc/passwd", "passwd"),
        ("..\\..\\boot.ini", "boot.ini"),
        (".bashrc", "bashrc"),
        ("invoice\u202egpj.exe", "invoicegpj.exe"),
        ("CON.txt", "_CON.txt"),
        ("nul", "_nul"),
        ("-rf.txt", "rf.txt"),
        ("a\r\nb.txt", "a_b.txt"),
        ("$(reboot).sh", "(reboot).sh"),
        (".pdf", "pdf"),
        ("\u202e.pdf", "pdf"),
        ("", "file"),
    ],
)
def test_an_attachment_keeps_its_name_and_loses_only_what_is_unsafe(sent: str, saved: str) -> None:
    assert safe_filename(sent) == saved


def test_a_long_japanese_name_is_cut_on_a_character_and_keeps_its_extension() -> None:
    saved = safe_filename("報告書" * 60 + ".pdf")
    assert saved.endswith(".pdf")
    assert saved.startswith("報告書")
    assert len(saved.encode()) <= 200


def test_known_models_are_the_configured_ones_the_cli_short_names_and_aliases() -> None:
    agent = AgentSettings(model="claude-sonnet-4-5")
    known = subaddress_models(agent, {"fast": "claude-haiku-4-5"})
    assert resolve("opus", known) == ("opus", None)
    assert resolve("claude-sonnet-4-5", known) == ("claude-sonnet-4-5", None)
    assert resolve("Fast", known) == ("claude-haiku-4-5", None)
    assert resolve(None, known) == (None, None)


def test_an_unknown_subaddress_gets_the_default_model_and_a_line_saying_so() -> None:
    model, note = resolve("gpt-9-ultra", subaddress_models(AgentSettings(), {}))
    assert model is None
    assert note is not None
    assert "'gpt-9-ultra'" in note
    assert "default model" in note


def test_an_empty_plain_mail_stays_empty_and_says_nothing_was_quoted() -> None:
    """An empty body read as "[quoted text removed]" and ran the agent on nothing."""
    from gateway_bot.channels.email.plain_quotes import read_plain

    assert read_plain("").text == ""
    assert read_plain("\n  \n").text == ""
