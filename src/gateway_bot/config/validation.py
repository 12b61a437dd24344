"""Pydantic validation errors as lines a person can act on: the server config, a repo's
``.gateway/`` files and the egress allowlist all report through it (the sandbox reads the
allowlist and must not import the server config)."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_errors(exc: ValidationError) -> list[str]:
    """One line per problem: the key path, what is wrong, and a hint."""
    problems = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        kind = error["type"]
        if kind == "missing":
            hint = "add this key"
        elif kind == "extra_forbidden":
            hint = "unknown key: check its spelling and indentation"
        elif "input" in error and not isinstance(error["input"], dict | list):
            hint = f"got {error['input']!r}"
        else:
            hint = "see the sample config in examples/"
        problems.append(f"{path}: {error['msg']} ({hint})")
    return problems
