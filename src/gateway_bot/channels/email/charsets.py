"""A text part's bytes decoded the way mail clients decode them, or a sentence saying
which characters could not be.

Mislabelled mail is common, and a replacement character in the agent's prompt is a word
the sender wrote and the agent never read. So, in order:

1. the declared label goes through the WHATWG Encoding Standard's label table
   (``webencodings``): ``iso-8859-1``, ``latin1`` and ``us-ascii`` mean windows-1252 (curly
   quotes and the euro sign at 0x80-0x9F), ``gb2312`` means GBK, ``ks_c_5601-1987`` EUC-KR;
2. bytes that are valid UTF-8 (with some non-ASCII in them) under a legacy single-byte
   label, or under none, are UTF-8: a client that forgot to say so wrote them, and the same
   bytes read as windows-1252 would be ``Ã©`` for every ``é``;
3. the declared charset strictly; when it fails (or is unknown), a detector
   (``charset-normalizer``) picks the charset from the bytes;
4. only then, the declared (or UTF-8) decoding with replacement characters, and a note
   for the sender saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

import charset_normalizer
import webencodings

_SEVEN_BIT = ("iso2022", "utf_7", "utf-7", "hz")
"""Encodings written in ASCII bytes: ASCII alone does not mean plain ASCII text."""
_MIN_COHERENCE = 0.1
"""The detector's language coherence under which its pick is a guess (random bytes get a
cp1006 or cp1250 reading with coherence 0): replacement characters and a note instead."""
_SINGLE_BYTE = {"windows-1252", "iso-8859-2", "iso-8859-15", "windows-1250", "windows-1257"}
"""Legacy labels under which valid multi-byte UTF-8 is a mislabel, not intended text."""


@dataclass(frozen=True)
class Decoded:
    text: str
    problem: str | None = None
    """Set when characters were lost: what the sender is told was left out."""


def codec_for(label: str | None) -> str | None:
    """The Python codec of a MIME charset label under the WHATWG table; None if unknown."""
    if not label:
        return None
    found = webencodings.lookup(label.strip().strip('"'))
    if found is None or found.name in ("replacement", "x-user-defined"):
        return None
    return str(found.codec_info.name)


def decode(payload: bytes, label: str | None) -> Decoded:
    """The text of ``payload`` declared as ``label`` (None: not declared)."""
    codec = codec_for(label)
    if payload.isascii() and not (codec or "").startswith(_SEVEN_BIT):
        return Decoded(payload.decode("ascii"))
    whatwg = webencodings.lookup(label or "us-ascii")
    if codec is None or (whatwg is not None and whatwg.name in _SINGLE_BYTE):
        try:
            return Decoded(payload.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    if codec is not None:
        strict = _strict(payload, codec)
        if strict is not None:
            return Decoded(strict)
    if codec in (None, "utf-8") and _mostly_utf8(payload):
        return Decoded(payload.decode("utf-8", errors="replace"), _lost(label))
    western = _strict(payload, "cp1252")
    if western is not None and _reads_as_words(western):
        return Decoded(western)  # the commonest mislabel: Western European text
    best = charset_normalizer.from_bytes(payload).best()
    if best is not None and best.encoding and best.coherence >= _MIN_COHERENCE:
        detected = _strict(payload, best.encoding)
        if detected is not None:
            return Decoded(detected)
    return Decoded(payload.decode(codec or "utf-8", errors="replace"), _lost(label))


def _lost(label: str | None) -> str:
    shown = f"marked {label}" if label else "with no charset"
    return (
        f"some characters of your mail could not be read (its text, {shown}, is not valid "
        "in that or any charset I could detect): they show as \ufffd"
    )


def _reads_as_words(text: str) -> bool:
    """Most of the non-ASCII characters are letters (``ü``, ``é``) or typographic
    punctuation (curly quotes, dashes, the euro sign), as in Western European text."""
    extra = [char for char in text if ord(char) > 0x7F]
    words = [
        char
        for char in extra
        if char.isalpha()
        or char in "\u2018\u2019\u201c\u201d\u2013\u2014\u20ac\u2026\u00a0\u00b0\u00a7\u00ab\u00bb"
    ]
    return len(words) >= 0.8 * len(extra)


def _mostly_utf8(payload: bytes) -> bool:
    """UTF-8 text with a few broken bytes (a cut multi-byte character) stays UTF-8: a
    detector would read all of it as some single-byte charset instead."""
    text = payload.decode("utf-8", errors="replace")
    broken = text.count("\ufffd")
    return sum(1 for char in text if ord(char) > 0x7F) - broken > broken


def _strict(payload: bytes, codec: str) -> str | None:
    try:
        return payload.decode(codec)
    except UnicodeDecodeError:
        if codec != "cp1252":
            return None
    except LookupError:
        return None
    # WHATWG's windows-1252 maps the five bytes Python's cp1252 leaves undefined to the C1
    # controls of the same number; those are dropped later as invisible characters.
    return payload.decode("cp1252", errors="surrogateescape").translate(_C1_FROM_ESCAPES)


_C1_FROM_ESCAPES = {0xDC00 + byte: byte for byte in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}
