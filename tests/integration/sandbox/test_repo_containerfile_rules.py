"""A repo's own Containerfile is hostile input to the host's image builder: it is held to
an allow-list (base image or earlier stages only, no RUN flags, no ADD, no ONBUILD, plain
text), checked on buildah's reading of the file and on cruder ones, so the tricks that make
a parser see something else than buildah (continuations, blank lines, byte order marks,
heredoc markers) find nothing to hide behind. Ordinary files pass."""

from __future__ import annotations

import pytest

from gateway_bot.sandbox.podman.repo_containerfile import (
    RepoContainerfileRefused,
    check_repo_containerfile,
)

CVE_2024_1753 = """\
FROM ${BASE_IMAGE} AS base
RUN ln -s / /rootfs
FROM ${BASE_IMAGE}
RUN --mount=type=bind,rw,source=/rootfs,target=/mnt,from=base touch /mnt/etc/pwned
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(RepoContainerfileRefused) as refused:
        check_repo_containerfile(text)
    return refused.value.problems


def test_the_cve_2024_1753_bind_mount_from_another_stage_is_refused() -> None:
    problems = problems_of(CVE_2024_1753)
    assert "--mount may not appear in a repo Containerfile" in problems
    assert any(p.startswith("line 4: RUN flags are not allowed (--mount=") for p in problems)


@pytest.mark.parametrize(
    "trick",
    [
        # buildah joins a continuation without a space: "rw,from=s"
        "FROM ${BASE_IMAGE}\nRUN --mount=type=bind,target=/h,rw\\\n,from=s,source=/x ls /h\n",
        # a blank line inside a continuation
        "FROM ${BASE_IMAGE}\nRUN echo a \\\n\n  --mo\\\nunt=type=bind ls\n",
        # split inside the word
        "FROM ${BASE_IMAGE}\nRUN --mo\\\nunt=type=bind,from=s,target=/h ls\n",
        # the backtick escape directive
        "# escape=`\nFROM ${BASE_IMAGE}\nRUN `\n  --mount=type=bind,from=base,target=/m ls\n",
        # a quoted heredoc marker hides nothing any more
        "FROM ${BASE_IMAGE}\nRUN echo '<<NEVER'\nRUN --mount=type=bind,from=s,target=/m ls\n",
    ],
)
def test_a_mount_hidden_from_a_parser_is_still_found(trick: str) -> None:
    assert "--mount may not appear in a repo Containerfile" in problems_of(trick)


def test_odd_characters_are_refused_before_anything_else() -> None:
    assert problems_of("\ufeff# escape=`\nFROM ${BASE_IMAGE}\n") == [
        "line 1: a byte order mark is not allowed"
    ]
    assert problems_of("FROM ${BASE_IMAGE}\nRUN echo a\x1cb\n") == [
        "line 2: control characters are not allowed"
    ]


def test_images_of_the_repos_choice_add_onbuild_and_flags_are_refused() -> None:
    text = (
        "# syntax=evil/frontend\n"
        "FROM docker.io/attacker/onbuild-trap\n"
        "ARG U=http://127.0.0.1:8080/secret\n"
        "ADD ${U} /got\n"
        "RUN --network=host curl example.org\n"
        "COPY --from=docker.io/library/alpine /etc/passwd /x\n"
        "VOLUME /data\n"
    )
    problems = problems_of(text)
    assert "line 1: parser directive syntax=evil/frontend is not allowed" in problems
    assert any(
        p.startswith("line 2: FROM docker.io/attacker/onbuild-trap is not allowed")
        for p in problems
    )
    assert "line 4: ADD is not allowed in a repo Containerfile" in problems
    assert "--network may not appear in a repo Containerfile" in problems
    assert (
        "line 6: COPY --from=docker.io/library/alpine is not allowed: only an earlier stage"
        in problems
    )
    assert "line 7: VOLUME is not allowed in a repo Containerfile" in problems
    assert "onbuild may not appear in a repo Containerfile" in problems


def test_ordinary_containerfiles_pass() -> None:
    check_repo_containerfile(
        "# escape=\\\nARG BASE_IMAGE=debian\nFROM ${BASE_IMAGE} AS build\r\n"
        "RUN apt-get update \\\n  && apt-get install -y make \\\n  # a comment\n  && make\n"
        "FROM $BASE_IMAGE\nCOPY --from=build --chown=1000:1000 /out /opt/out\n"
        'COPY claude /usr/local/bin/claude\nENV A=1\nWORKDIR /workspace\nCMD ["sh"]\n'
    )
