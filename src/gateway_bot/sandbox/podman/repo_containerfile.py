"""What a target repo's own ``.gateway/Containerfile`` may ask of the host's image builder.

Whoever lands a commit on the repo's default branch writes this file, and the daemon builds
it with the host's rootful buildah: it is hostile input. Buildah before 1.35.1 (podman
5.0.1) has CVE-2024-1753: ``RUN --mount=type=bind,from=<stage>,source=<link to />`` mounts
the host's root filesystem read-write into the build step; Debian 12 ships buildah 1.28.
``ADD <url>`` is fetched by buildah itself, on the host's network, whatever the build's
``--network`` says (loopback and cloud metadata included).

A deny-list over a parse of our own loses to every difference between our parser and
buildah's (a continuation joined with or without a space, a blank line inside one, a byte
order mark before a directive, a heredoc marker in a quoted string). So this is an
allow-list, checked on buildah's own reading of the file *and* on cruder ones:

* the text is plain: no byte order mark, no control characters but tab and newline
  (``\\r\\n`` line ends are accepted);
* instructions are only FROM, RUN, COPY, ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, CMD,
  ENTRYPOINT, STOPSIGNAL, HEALTHCHECK, SHELL (no ADD, no ONBUILD, no VOLUME);
* FROM names ``${BASE_IMAGE}`` or an earlier stage: no image of the repo's choosing, whose
  ONBUILD triggers would run unchecked;
* RUN takes no flags at all; COPY only ``--chown``/``--chmod`` and ``--from`` an earlier
  stage;
* whatever the joining of lines, the words ``--mount``, ``--network``, ``--security`` and
  ``onbuild`` appear nowhere (also with every escape character and all whitespace
  removed);
* the only parser directive is ``escape``.

The build itself then runs without network and with a small capability set (see
``ImageBuilder``).
"""

from __future__ import annotations

import re

_DIRECTIVE = re.compile(r"^#\s*([A-Za-z_]+)\s*=\s*(\S+)\s*$")
_ALLOWED = {
    "FROM", "RUN", "COPY", "ENV", "ARG", "WORKDIR", "USER", "LABEL", "EXPOSE", "CMD",
    "ENTRYPOINT", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip
_FORBIDDEN_WORDS = ("--mount", "--network", "--security", "onbuild")
_BASE_IMAGE = re.compile(r"^(\$\{BASE_IMAGE\}|\$BASE_IMAGE)$")
_STAGE_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_COPY_FLAG = re.compile(r"^--(chown|chmod)=\S+$")


class RepoContainerfileRefused(ValueError):
    """The repo's Containerfile asks for something the host will not do; ``problems`` says
    what, one line each, with the line number."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def check_repo_containerfile(text: str) -> None:
    """Raise RepoContainerfileRefused listing every problem; return quietly if none."""
    problems = _character_problems(text)
    if problems:
        raise RepoContainerfileRefused(problems)
    lines = text.replace("\r\n", "\n").split("\n")
    escape, problems = _directives(lines)
    problems += _word_problems(text, escape)
    stages: set[str] = set()
    for number, instruction in _instructions(lines, escape):
        keyword, _, rest = instruction.strip().partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        where = f"line {number}"
        if keyword not in _ALLOWED:
            problems.append(f"{where}: {keyword or '?'} is not allowed in a repo Containerfile")
        elif keyword == "FROM":
            problems += [f"{where}: {p}" for p in _from_problems(rest, stages)]
        elif keyword == "RUN" and rest.startswith("--"):
            problems.append(f"{where}: RUN flags are not allowed ({rest.split()[0]})")
        elif keyword == "COPY":
            problems += [f"{where}: {p}" for p in _copy_problems(rest, stages)]
    if problems:
        raise RepoContainerfileRefused(problems)


def _character_problems(text: str) -> list[str]:
    problems = []
    if text.startswith("\ufeff"):
        problems.append("line 1: a byte order mark is not allowed")
    for number, line in enumerate(text.split("\n"), 1):
        body = line[:-1] if line.endswith("\r") else line
        if any((ord(ch) < 32 and ch != "\t") or ord(ch) == 127 for ch in body):
            problems.append(f"line {number}: control characters are not allowed")
        elif any(ch in body for ch in ("\u2028", "\u2029", "\x85")):
            problems.append(f"line {number}: unicode line separators are not allowed")
    return problems


def _directives(lines: list[str]) -> tuple[str, list[str]]:
    escape, problems = "\\", []
    for number, line in enumerate(lines, 1):
        directive = _DIRECTIVE.match(line)
        if not directive:
            break
        name, value = directive.group(1).lower(), directive.group(2)
        if name == "escape" and value in ("\\", "`"):
            escape = value
        else:
            problems.append(f"line {number}: parser directive {name}={value} is not allowed")
    return escape, problems


def _word_problems(text: str, escape: str) -> list[str]:
    """The forbidden words, searched in readings cruder than any parser's: the raw text,
    the text with escape+newline pairs removed, and the text with every escape character
    and all whitespace removed."""
    folded = text.lower()
    readings = [
        folded,
        re.sub(re.escape(escape) + r"[ \t]*\r?\n", "", folded),
        re.sub(r"\s+", "", folded.replace(escape, "")),
    ]
    found = sorted({word for word in _FORBIDDEN_WORDS for r in readings if word in r})
    return [f"{word} may not appear in a repo Containerfile" for word in found]


def _instructions(lines: list[str], escape: str) -> list[tuple[int, str]]:
    """Instructions as buildah joins them: a line ending in the escape character continues
    on the next non-empty, non-comment line, joined without a space."""
    result: list[tuple[int, str]] = []
    current = ""
    start = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not current:
            start = number
        if stripped.endswith(escape):
            current += raw.rstrip()[: -len(escape)]
            continue
        result.append((start, current + raw))
        current = ""
    if current:
        result.append((start, current))
    return result


def _from_problems(rest: str, stages: set[str]) -> list[str]:
    words = rest.split()
    if words and words[0].startswith("--"):
        return [f"FROM flags are not allowed ({words[0]})"]
    if not words:
        return ["FROM needs an image"]
    image, problems = words[0], []
    if not _BASE_IMAGE.match(image) and image.lower() not in stages:
        problems.append(
            f"FROM {image} is not allowed: use FROM ${{BASE_IMAGE}} (the operator's base "
            "image) or an earlier stage"
        )
    if len(words) == 3 and words[1].lower() == "as" and _STAGE_NAME.match(words[2].lower()):
        stages.add(words[2].lower())
    elif len(words) != 1:
        problems.append(f"FROM {rest} is not understood (FROM IMAGE [AS NAME])")
    return problems


def _copy_problems(rest: str, stages: set[str]) -> list[str]:
    problems = []
    for word in rest.split():
        if not word.startswith("--"):
            break
        if word.lower().startswith("--from="):
            if word.split("=", 1)[1].lower() not in stages:
                problems.append(f"COPY {word} is not allowed: only an earlier stage")
        elif not _COPY_FLAG.match(word):
            problems.append(f"COPY flag {word.split('=')[0]} is not allowed")
    return problems
