"""Every mail of the mail-text corpus (``tests/corpus/mail_text/``: Gmail, Outlook on the
web, desktop and mobile, Apple Mail and iOS, Thunderbird, Yahoo, mutt, Alpine; top-posted,
inline, bottom-posted, forwarded; five languages, a dozen charsets, the hidden-text tricks)
read by the channel's pure pipeline gives exactly the text the agent must read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.mail_text_cases import expected_text
from tests.support import paths

CORPUS = paths.CORPUS / "mail_text"
MAILS = sorted(CORPUS.glob("*.eml"))


def test_the_corpus_holds_at_least_150_mails() -> None:
    assert len(MAILS) >= 150


@pytest.mark.parametrize("path", MAILS, ids=[path.stem for path in MAILS])
def test_the_agent_reads_what_the_person_wrote(path: Path) -> None:
    want = path.with_suffix(".txt").read_text(encoding="utf-8").rstrip("\n")
    assert expected_text(path.read_bytes()) == want
