"""A repo's own Containerfile is hostile input to the host's image builder: the shapes that
reach outside the build (CVE-2024-1753's bind mount from another stage, RUN flags, ADD of
URLs, parser directives) are refused with the line they are on; ordinary files pass."""

from __future__ import annotations

import pytest

from gateway_bot.sandbox.podman.repo_containerfile import (
    RepoContainerfileRefused,
    check_repo_containerfile,
)

CVE_2024_1753 = """\
FROM docker.io/library/alpine AS base
RUN ln -s / /rootfs
FROM docker.io/library/alpine
RUN --mount=type=bind,rw,source=/rootfs,target=/mnt,from=base touch /mnt/etc/pwned
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(RepoContainerfileRefused) as refused:
        check_repo_containerfile(text)
    return refused.value.problems


def test_the_cve_2024_1753_bind_mount_from_another_stage_is_refused() -> None:
    problems = problems_of(CVE_2024_1753)
    assert any(p.startswith("line 4: RUN --mount may not use from=") for p in problems)
    assert any("source '/rootfs' leaves the build context" in p for p in problems)


def test_a_mount_hidden_by_continuations_or_another_escape_character_is_found() -> None:
    continued = "FROM x\nRUN \\\n  --mount=type=bind,from=base,target=/m \\\n  ls /m\n"
    assert any("from=" in p for p in problems_of(continued))
    backtick = "# escape=`\nFROM x\nRUN `\n  --mount=type=bind,from=base,target=/m ls\n"
    assert any("from=" in p for p in problems_of(backtick))


def test_mounts_that_leave_the_context_and_other_run_flags_are_refused() -> None:
    text = (
        "FROM x\n"
        "RUN --mount=type=bind,source=../../etc,target=/e cat /e/shadow\n"
        "RUN --mount=type=secret,id=k cat /run/secrets/k\n"
        "RUN --network=host curl example.org\n"
        "RUN --security=insecure true\n"
    )
    problems = problems_of(text)
    assert "line 2: RUN --mount source '../../etc' leaves the build context" in problems
    assert any(p.startswith("line 3: RUN --mount type=secret") for p in problems)
    assert "line 4: RUN flag --network is not allowed" in problems
    assert "line 5: RUN flag --security is not allowed" in problems


def test_add_may_not_download_and_directives_may_not_pick_a_frontend() -> None:
    text = "# syntax=evil/frontend\nFROM x\nADD https://example.org/x.tgz /x\nADD git@h:r.git /r\n"
    problems = problems_of(text)
    assert "line 1: parser directive syntax=evil/frontend is not allowed" in problems
    assert "line 3: ADD may not fetch URLs (download in a RUN step)" in problems
    assert "line 4: ADD may not fetch git repositories" in problems


def test_ordinary_containerfiles_pass() -> None:
    check_repo_containerfile(
        "ARG BASE_IMAGE=debian\nFROM ${BASE_IMAGE}\n"
        "RUN --mount=type=cache,target=/var/cache/apt apt-get install -y make\n"
        "RUN --mount=type=bind,source=.,target=/ctx ls /ctx\n"
        "RUN <<EOF\n--mount=type=bind,from=base this is script text\nEOF\n"
        "COPY claude /usr/local/bin/claude\nWORKDIR /workspace\n"
    )
