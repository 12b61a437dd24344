"""What a target repo's own ``.gateway/Containerfile`` may ask of the host's image builder.

Whoever lands a commit on the repo's default branch writes this file, and the daemon builds
it with the host's rootful buildah: it is hostile input. Buildah before 1.35.1 (podman
5.0.1) has CVE-2024-1753: ``RUN --mount=type=bind,from=<stage>,source=<link to />`` mounts
the host's root filesystem read-write into the build step. Debian 12 ships buildah 1.28.
So, whatever the buildah version:

* ``RUN --mount`` may not take ``from=`` (another stage or image) and its ``source`` may not
  leave the build context (absolute, ``..``); only ``bind``, ``cache`` and ``tmpfs`` mounts;
  no other ``RUN`` flag (``--network``, ``--security``) at all;
* ``ADD`` may not fetch URLs (the builder would download them on the host's network);
* parser directives other than ``escape`` are refused (``syntax`` would choose a frontend).

The build itself then runs without network and with a small capability set (see
``ImageBuilder``): the repo's steps cannot reach anything but what FROM and the build
context give them.
"""

from __future__ import annotations

import posixpath
import re
import shlex

_DIRECTIVE = re.compile(r"^#\s*([A-Za-z_]+)\s*=\s*(\S+)\s*$")
_INSTRUCTION = re.compile(r"^\s*([A-Za-z]+)(?:\s+(.*))?$", re.DOTALL)
_ALLOWED_MOUNT_TYPES = {"bind", "cache", "tmpfs"}
_MOUNT_KEYS = {
    "type", "target", "dst", "destination", "source", "src", "rw", "readwrite", "ro",
    "readonly", "id", "sharing", "mode", "uid", "gid", "size", "tmpfs-size", "tmpfs-mode",
    "z", "Z", "U", "relabel", "bind-propagation",
}  # fmt: skip


class RepoContainerfileRefused(ValueError):
    """The repo's Containerfile asks for something the host will not do; ``problems`` says
    what, one line each, with the line number."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def check_repo_containerfile(text: str) -> None:
    """Raise RepoContainerfileRefused listing every problem; return quietly if none."""
    problems: list[str] = []
    escape = "\\"
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):  # parser directives come first
        directive = _DIRECTIVE.match(line)
        if not directive:
            break
        name, value = directive.group(1).lower(), directive.group(2)
        if name == "escape" and value in ("\\", "`"):
            escape = value
        else:
            problems.append(f"line {number}: parser directive {name}={value} is not allowed")
    for number, instruction in _instructions(lines, escape):
        match = _INSTRUCTION.match(instruction)
        if not match:
            continue
        keyword, rest = match.group(1).upper(), (match.group(2) or "")
        if keyword == "RUN":
            problems += [f"line {number}: {p}" for p in _run_flag_problems(rest)]
        elif keyword == "ADD" and "://" in rest:
            problems.append(f"line {number}: ADD may not fetch URLs (download in a RUN step)")
        elif keyword == "ADD" and re.search(r"(^|\s)git@", rest):
            problems.append(f"line {number}: ADD may not fetch git repositories")
    if problems:
        raise RepoContainerfileRefused(problems)


def _instructions(lines: list[str], escape: str) -> list[tuple[int, str]]:
    """Logical instructions (continuations joined, comments dropped) with their first line.
    Heredoc bodies are skipped: their text is the step's input, not its flags."""
    result: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    heredoc: str | None = None
    for number, raw in enumerate(lines, 1):
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # comment lines inside a continuation are ignored by the parser
        if not current:
            start = number
        if stripped.endswith(escape):
            current.append(stripped[: -len(escape)])
            continue
        current.append(stripped)
        joined = " ".join(current)
        result.append((start, joined))
        current = []
        marker = re.search(r"<<-?\s*[\"']?([A-Za-z0-9_]+)[\"']?", joined)
        if marker and joined.split(None, 1)[0].upper() in ("RUN", "COPY"):
            heredoc = marker.group(1)
    if current:
        result.append((start, " ".join(current)))
    return result


def _run_flag_problems(rest: str) -> list[str]:
    problems: list[str] = []
    try:
        words = shlex.split(rest, posix=True)
    except ValueError:
        words = rest.split()
    for word in words:
        if not word.startswith("--"):
            break  # flags come before the command
        flag, _, value = word.partition("=")
        if flag != "--mount":
            problems.append(f"RUN flag {flag} is not allowed")
            continue
        problems += _mount_problems(value)
    # Belt and braces: a flag hidden from the tokenizer above is still caught.
    if re.search(r"--mount\S*from=", rest, re.IGNORECASE) and not any(
        "from=" in p for p in problems
    ):
        problems.append("RUN --mount may not use from= (CVE-2024-1753)")
    return problems


def _mount_problems(value: str) -> list[str]:
    options: dict[str, str] = {}
    for item in value.split(","):
        key, _, val = item.partition("=")
        options[key.strip()] = val.strip()
    problems = []
    kind = options.get("type", "bind")
    if kind not in _ALLOWED_MOUNT_TYPES:
        problems.append(f"RUN --mount type={kind} is not allowed (bind, cache, tmpfs only)")
    if "from" in options:
        problems.append("RUN --mount may not use from= (CVE-2024-1753)")
    unknown = sorted(set(options) - _MOUNT_KEYS - {"from"})
    if unknown:
        problems.append(f"RUN --mount option {', '.join(unknown)} is not allowed")
    source = options.get("source") or options.get("src")
    if source is not None:
        normal = posixpath.normpath("/" + source.lstrip("/"))
        if source.startswith("/") or ".." in normal.split("/") or ".." in source.split("/"):
            problems.append(f"RUN --mount source {source!r} leaves the build context")
    return problems
