"""Writes the starting email cases of the bad-input corpus (``tests/corpus/email/``).

Run once (``uv run python -m tests.corpus.make_email_corpus``); it writes only the names it
makes, so cases added by hand beside them stay. Each file is a raw mail as the MX hands it
over. Its name says what a user must see (``tests/security/test_bad_input_corpus.py`` checks it):

- ``answer--*``: from the allowed sender with DMARC pass: the agent's answer comes once,
  threaded under it (notices beside it are fine: "only 100 attachments were saved");
- ``notice--*``: answered, but not by the agent (a command, a mail too big to read);
- ``refuse--*``: never answered (spoofed, unauthenticated, automatic, unreadable sender).

The test's daemon allows ``alice@example.test``; the MX's authserv-id is
``mx.example.test``; ``max_mail_bytes`` is lowered so an oversized mail stays small here.
"""

from __future__ import annotations

import base64
import itertools
from pathlib import Path

HERE = Path(__file__).parent / "email"
ID = "mx.example.test"
ALICE = "alice@example.test"
_ids = itertools.count(1)


def _results(authserv_id: str, verdicts: str) -> str:
    return f"Authentication-Results: {authserv_id}; {verdicts}\r\n"


def _auth(domain: str = "example.test") -> str:
    return _results(ID, f"spf=pass smtp.mailfrom={domain}; dmarc=pass header.from={domain}")


def _mail(
    *,
    headers: str = "",
    auth: str | None = None,
    sender: str = ALICE,
    subject: str = "corpus",
    content_type: str = "text/plain; charset=utf-8",
    body: bytes | str = "hello from the corpus",
    extra: str = "",
) -> bytes:
    number = next(_ids)
    top = _auth() if auth is None else auth
    head = (
        f"{top}{headers}From: {sender}\r\nTo: bot@example.test\r\nSubject: {subject}\r\n"
        f"Message-ID: <corpus-{number}@example.test>\r\nMIME-Version: 1.0\r\n"
        f"{extra}Content-Type: {content_type}\r\n\r\n"
    )
    data = body.encode() if isinstance(body, str) else body
    return head.encode() + data + b"\r\n"


def _multipart(parts: list[tuple[str, str, bytes]], boundary: str = "BOUND") -> bytes:
    out = b""
    for headers, _, data in parts:
        out += f"--{boundary}\r\n{headers}\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def _attachment(name_param: str, data: bytes = b"file body\n") -> tuple[str, str, bytes]:
    encoded = base64.encodebytes(data).decode()
    headers = (
        "Content-Type: application/octet-stream\r\n"
        f"Content-Disposition: attachment; {name_param}\r\n"
        "Content-Transfer-Encoding: base64\r\n"
    )
    return headers, "", encoded.encode()


_NO_TEXT = {
    "empty-body",
    "only-whitespace",
    "multipart-empty",
    "multipart-no-boundary",
    "message-rfc822-only",
    "unknown-type",
    "unknown-transfer-encoding",
}
"""Mails with no text the parser can read: the sender is told the mail was empty (a
forwarded mail alone is not read as the sender's words)."""


def _expect(name: str) -> str:
    return "notice" if name in _NO_TEXT else "answer"


def cases() -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    # -- spoofed or missing authentication: never answered -----------------------------
    spoofs = {
        "no-auth-results": "",
        "wrong-authserv-id": _results("mx.evil.test", "dmarc=pass header.from=example.test"),
        "lookalike-prefix": _results(f"x{ID}", "dmarc=pass header.from=example.test"),
        "lookalike-suffix": _results(f"{ID}.evil.test", "dmarc=pass header.from=example.test"),
        "dmarc-fail": _results(ID, "dmarc=fail header.from=example.test"),
        "dmarc-none": _results(ID, "dmarc=none header.from=example.test"),
        "dmarc-temperror": _results(ID, "dmarc=temperror header.from=example.test"),
        "pass-in-comment": _results(ID, "dmarc=fail (dmarc=pass) header.from=example.test"),
        "pass-for-other-domain": _results(ID, "dmarc=pass header.from=evil.test"),
        "pass-beside-fail": _results(
            ID, "dmarc=fail header.from=example.test; dmarc=pass header.from=example.test"
        ),
        "two-trusted-headers": _auth() + _auth(),
        "forged-pass-below-fail": _results(ID, "dmarc=fail header.from=example.test") + _auth(),
        "forged-pass-below-other": "Authentication-Results: mx.other.test; none\r\n" + _auth(),
        "unparseable-results": _results(ID, "dmarc="),
        "results-garbage": "Authentication-Results: ;;;;====\r\n",
        "results-empty": "Authentication-Results: \r\n",
        "spf-pass-only": _results(ID, "spf=pass smtp.mailfrom=example.test"),
        "dkim-pass-only": _results(ID, "dkim=pass header.d=example.test"),
        "results-8bit": _results(ID, "dmarc=pass header.from=ex\u00e4mple.test"),
    }
    for name, auth in spoofs.items():
        found[f"refuse--{name}.eml"] = _mail(auth=auth)
    senders = {
        "two-from-mailboxes": "alice@example.test, mallory@evil.test",
        "empty-from": "",
        "from-without-domain": "alice",
        "from-group-syntax": "undisclosed-recipients:;",
        "quoted-local-part-at": '"alice@example.test"@evil.test',
        "from-ip-literal": "alice@[127.0.0.1]",
        "from-unicode-local": "\u00e4lice@example.test",
        "from-control-chars": "ali\x01ce@example.test",
        "from-very-long": "a" * 900 + "@example.test",
        "from-other-domain-passed": "mallory@evil.test",
    }
    for name, sender in senders.items():
        auth = _auth("evil.test") if "evil" in sender and "," not in sender else None
        found[f"refuse--{name}.eml"] = _mail(sender=sender, auth=auth)
    found["refuse--second-from-header.eml"] = _mail(headers="From: mallory@evil.test\r\n")
    automatic = {
        "auto-submitted-auto-replied": "Auto-Submitted: auto-replied\r\n",
        "auto-submitted-generated": "Auto-Submitted: auto-generated\r\n",
        "auto-submitted-odd-case": "Auto-Submitted: Auto-Replied; foo=bar\r\n",
    }
    for name, header in automatic.items():
        found[f"refuse--{name}.eml"] = _mail(headers=header)
    found["refuse--from-the-bot-itself.eml"] = _mail(sender="bot@example.test")
    # -- odd but honest mail from the allowed sender: answered -------------------------
    charsets = {
        "big5": ("big5", "中文測試".encode("big5")),
        "iso-8859-1": ("iso-8859-1", "caf\u00e9 cr\u00e8me".encode("latin-1")),
        "windows-1252": ("windows-1252", "\u201cquoted\u201d \u20ac".encode("cp1252")),
        "unknown-charset": ("x-no-such-charset", b"plain words anyway"),
        "charset-lies-utf8-is-latin1": ("utf-8", "caf\u00e9".encode("latin-1")),
        "missing-charset-8bit": ("", "na\u00efve".encode()),
        "shift-jis": ("shift_jis", "日本語".encode("shift_jis")),
        "koi8-r": ("koi8-r", "привет".encode("koi8-r")),
        "utf-16-declared": ("utf-16", "wide text".encode("utf-16")),
        "gb2312": ("gb2312", "简体".encode("gb2312")),
    }
    for name, (charset, data) in charsets.items():
        kind = f"text/plain; charset={charset}" if charset else "text/plain"
        found[f"answer--charset-{name}.eml"] = _mail(content_type=kind, body=data)
    bodies = {
        "empty-body": ("text/plain", b""),
        "only-whitespace": ("text/plain", b"   \r\n\t\r\n"),
        "html-only": ("text/html; charset=utf-8", b"<p>hello <b>html</b></p>"),
        "html-script": ("text/html", b"<script>alert(1)</script><p>visible words</p>"),
        "html-deep-nesting": ("text/html", b"<div>" * 5000 + b"deep words"),
        "html-many-quotes": (
            "text/html",
            b"".join(b"<blockquote type=cite>q</blockquote><p>a</p>" for _ in range(2000)),
        ),
        "html-unclosed-angles": ("text/html", b"<" * 20000 + b"words"),
        "html-huge-attribute": ("text/html", b'<p title="' + b"x" * 150000 + b'">words</p>'),
        "html-style-bomb": ("text/html", b"<style>" + b"a{}" * 30000 + b"</style><p>w</p>"),
        "nul-bytes": ("text/plain", b"before\x00after"),
        "bidi-override": ("text/plain; charset=utf-8", "\u202eevil\u202c text".encode()),
        "zalgo": ("text/plain; charset=utf-8", ("z\u0336\u0353" * 200).encode()),
        "very-long-line": ("text/plain", b"x" * 20000),
        "many-lines": ("text/plain", b"line\r\n" * 20000),
        "only-quoted": ("text/plain", b"> all of it quoted\r\n> more\r\n"),
        "inline-reply": ("text/plain", b"> question?\r\nanswer\r\n> second?\r\nsecond answer\r\n"),
        "emoji-only": ("text/plain; charset=utf-8", "\U0001f600\U0001f4a9".encode()),
    }
    for name, (kind, data) in bodies.items():
        found[f"{_expect(name)}--{name}.eml"] = _mail(content_type=kind, body=data)
    encodings = {
        "base64-broken": ("base64", b"!!!not base64!!!"),
        "base64-truncated": ("base64", b"aGVsbG8gd29y"),
        "qp-broken": ("quoted-printable", b"soft=\r\nbreak =ZZ bad =E4=B8"),
        "unknown-transfer-encoding": ("x-uuencode", b"begin 644 x\r\n`\r\nend\r\n"),
        "7bit-with-8bit-data": ("7bit", "na\u00efve".encode()),
    }
    for name, (cte, data) in encodings.items():
        found[f"{_expect(name)}--{name}.eml"] = _mail(
            extra=f"Content-Transfer-Encoding: {cte}\r\n", body=data
        )
    headers = {
        "subject-encoded-big5": "=?big5?B?pKSk5Q==?=",
        "subject-broken-encoded-word": "=?utf-8?q?broken",
        "subject-very-long": "s" * 5000,
        "subject-control-chars": "hi\x1b[31mred\x07",
        "subject-forged-tag": "[ID:deadbeef] hijack someone's thread",
        "subject-many-re": "Re: " * 300 + "loop",
    }
    for name, subject in headers.items():
        found[f"answer--{name}.eml"] = _mail(subject=subject)
    found["answer--huge-header.eml"] = _mail(headers="X-Big: " + "h" * 60000 + "\r\n")
    found["answer--thousand-headers.eml"] = _mail(
        headers="".join(f"X-H{n}: v\r\n" for n in range(1000))
    )
    found["answer--in-reply-to-garbage.eml"] = _mail(
        headers="In-Reply-To: <<<>>> not an id\r\nReferences: " + "<x@y> " * 500 + "\r\n"
    )
    found["answer--in-reply-to-forged-ours.eml"] = _mail(
        headers="In-Reply-To: <gwb.deadbeef.1@example.test>\r\n"
    )
    # -- MIME structure ------------------------------------------------------------------
    text_part = ("Content-Type: text/plain; charset=utf-8\r\n", "", b"body words")
    structures = {
        "multipart-no-boundary": ("multipart/mixed", b"no boundary parameter at all"),
        "multipart-unterminated": (
            "multipart/mixed; boundary=BOUND",
            b"--BOUND\r\nContent-Type: text/plain\r\n\r\nnever closed",
        ),
        "multipart-empty": ("multipart/mixed; boundary=BOUND", b"--BOUND--\r\n"),
        "multipart-nested-deep": (
            "multipart/mixed; boundary=B0",
            b"".join(
                f"--B{n}\r\nContent-Type: multipart/mixed; boundary=B{n + 1}\r\n\r\n".encode()
                for n in range(60)
            )
            + b"--B60\r\nContent-Type: text/plain\r\n\r\ndeep\r\n",
        ),
        "alternative-html-and-plain": (
            "multipart/alternative; boundary=BOUND",
            _multipart([text_part, ("Content-Type: text/html\r\n", "", b"<p>html words</p>")]),
        ),
        "message-rfc822-only": (
            "message/rfc822",
            b"From: x@y\r\nSubject: inner\r\n\r\ninner body",
        ),
        "unknown-type": ("application/x-weird", b"\x00\x01\x02"),
        "content-type-garbage": (";;;=", b"words"),
    }
    for name, (kind, data) in structures.items():
        found[f"{_expect(name)}--{name}.eml"] = _mail(content_type=kind, body=data)
    names = {
        "traversal": 'filename="../../etc/passwd"',
        "traversal-backslash": 'filename="..\\..\\windows\\system32\\cmd.exe"',
        "absolute": 'filename="/etc/shadow"',
        "encoded-traversal": "filename*=utf-8''..%2F..%2F.ssh%2Fauthorized_keys",
        "dotfile": 'filename=".bashrc"',
        "dot-dot": 'filename=".."',
        "nul-in-name": 'filename="a\x00b.txt"',
        "reserved-con": 'filename="CON"',
        "reserved-nul-ext": 'filename="nul.txt"',
        "very-long-name": f'filename="{"n" * 400}.txt"',
        "unicode-name": "filename*=utf-8''%E2%80%AEgnp.exe",
        "empty-name": 'filename=""',
        "newline-in-name": 'filename="a\r\n b.txt"',
        "glob-name": 'filename="*.txt"',
        "dash-name": 'filename="-rf"',
    }
    for name, param in names.items():
        found[f"answer--attachment-{name}.eml"] = _mail(
            content_type="multipart/mixed; boundary=BOUND",
            body=_multipart([text_part, _attachment(param)]),
        )
    found["answer--attachments-many.eml"] = _mail(
        content_type="multipart/mixed; boundary=BOUND",
        body=_multipart([text_part] + [_attachment(f'filename="f{n}.txt"') for n in range(150)]),
    )
    found["answer--authserv-id-in-capitals.eml"] = _mail(  # a domain name: same id
        auth=_results(f"{ID.upper()}", "dmarc=pass header.from=example.test")
    )
    commands = {
        "status": b"/status\r\n",
        "unknown": b"/nosuchcommand\r\n",
        "model-injection": b"/model $(reboot)\r\n",
        "stop-nothing-running": b"/stop\r\n",
    }
    for name, data in commands.items():
        found[f"notice--command-{name}.eml"] = _mail(body=data)
    found["notice--oversized-mail.eml"] = _mail(body=b"y" * 300_000)
    return found


def main() -> None:
    HERE.mkdir(exist_ok=True)
    made = cases()
    for name, data in made.items():
        (HERE / name).write_bytes(data)
    print(f"{len(made)} cases in {HERE}")


if __name__ == "__main__":
    main()
