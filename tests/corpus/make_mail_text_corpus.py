"""Writes the mail-text corpus (``tests/corpus/mail_text/``): mails shaped as real clients
write them, each with the text the agent must read (``NAME.eml`` + ``NAME.txt``).

Run ``uv run python -m tests.corpus.make_mail_text_corpus`` after changing a template. The
client structures follow their own output as public mail-parser fixtures show it (sources
in the folder's README). Each case says which words the agent must read (the sender's, a
forward's) and which it must never read (history, hidden text): a case whose text breaks
either is not written, and the script fails; the expected text is then the pipeline's,
with those checks, reviewed in the diff like any other change.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.corpus.mail_text_cases import all_cases, expected_text

HERE = Path(__file__).parent / "mail_text"


def main() -> int:
    HERE.mkdir(exist_ok=True)
    for old in HERE.glob("*.eml"):
        old.unlink()
    for old in HERE.glob("*.txt"):
        old.unlink()
    failures = []
    cases = all_cases()
    for case in cases:
        text = expected_text(case.raw)
        missing = [word for word in case.keep if word not in text]
        leaked = [word for word in case.drop if word in text]
        if missing or leaked:
            failures.append(f"{case.name}: missing {missing} leaked {leaked}\n{text}\n")
            continue
        (HERE / f"{case.name}.eml").write_bytes(case.raw)
        (HERE / f"{case.name}.txt").write_text(text + "\n", encoding="utf-8")
    print(f"{len(cases) - len(failures)} of {len(cases)} written", file=sys.stderr)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
