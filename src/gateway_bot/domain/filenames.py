"""A file name a sender chose, made safe to write into the agent's inbox and to show the
agent, keeping the name the sender sees.

People name files in their language: ``Überweisung März.pdf``, ``見積書.xlsx``,
``Παραγγελία.docx``. Such a name keeps its letters (NFC-normalised, so the ``ü`` a Mac
sends as ``u`` + combining diaeresis is one character). Only what is unsafe changes:

- on the file system: path separators (the last component is kept), control characters,
  a leading dot (hidden file), trailing dots and spaces, Windows' reserved characters
  (``<>:"|?*``) and device names (``CON``, ``NUL.txt``, ``COM1``...), a length past 100
  characters or 200 bytes of UTF-8 (the extension is kept when it is cut);
- to the agent: invisible and bidi-control characters (``invoice\u202egpj.exe`` would read
  as ``invoiceexe.jpg``), shell-active characters (``$``, backquote), a leading ``-`` that a
  command would take for an option.

A name with nothing left before its extension gets ``file`` as its stem, never only the
extension.
"""

from __future__ import annotations

import re
import unicodedata

MAX_CHARS = 100
MAX_BYTES = 200
_UNSAFE = re.compile(r'[<>:"|?*$`\\/]')
_RESERVED = re.compile(r"^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³])$", re.IGNORECASE)


def safe_filename(name: str) -> str:
    """A single, visible, portable file name as close to ``name`` as is safe."""
    base = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    kept = "".join(_safe_char(char) for char in base)
    kept = " ".join(kept.split(" "))  # other white space became spaces: no tabs, no NBSP runs
    kept = re.sub(r"_{2,}", "_", re.sub(r" {2,}", " ", kept)).strip(" .")
    kept = kept.lstrip("-._ ")
    stem, dot, suffix = kept.rpartition(".")
    if not dot:
        stem, suffix = kept, ""
    elif not stem:  # ".pdf" or a name that was only unsafe characters and an extension
        stem = ""
    if not stem.strip("_ "):
        stem = "file"
    if _RESERVED.match(stem.split(".")[0].rstrip(" ")):  # Windows ignores "CON .txt"'s space
        stem = f"_{stem}"
    return _bounded(stem, suffix if len(suffix) <= 16 else "")


def _safe_char(char: str) -> str:
    category = unicodedata.category(char)
    if category in ("Cf", "Cc", "Cs", "Co", "Cn") or 0xE0000 <= ord(char) <= 0xE0FFF:
        return "" if category == "Cf" else "_"
    if category in ("Zs", "Zl", "Zp"):
        return " "
    return "_" if _UNSAFE.match(char) else char


def _bounded(stem: str, suffix: str) -> str:
    tail = f".{suffix}" if suffix else ""
    room_chars = MAX_CHARS - len(tail)
    room_bytes = MAX_BYTES - len(tail.encode())
    cut = stem[:room_chars]
    while len(cut.encode()) > room_bytes:
        cut = cut[:-1]
    return (cut.rstrip(" .") or "file") + tail
