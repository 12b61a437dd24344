"""Pydantic validation errors as lines a person can act on: the server config, a repo's
``.gateway/`` files and the egress allowlist all report through it (the sandbox reads the
allowlist and must not import the server config)."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence

from pydantic import BaseModel, ValidationError


def describe_validation_errors(
    exc: ValidationError, model: type[BaseModel] | None = None
) -> list[str]:
    """One line per problem: the key path, what is wrong, and a hint (with ``model``, an
    unknown key close to a known one is named: "did you mean 'channels'?")."""
    problems = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        kind = error["type"]
        if kind == "missing":
            hint = "add this key"
        elif kind == "extra_forbidden":
            hint = "unknown key: check its spelling and indentation"
            if model is not None and (close := _close_key(model, error["loc"])):
                hint += f"; did you mean {close!r}?"
        elif "input" in error and not isinstance(error["input"], dict | list):
            hint = f"got {error['input']!r}"
        else:
            hint = "see the sample config in examples/"
        problems.append(f"{path}: {error['msg']} ({hint})")
    return problems


def _close_key(model: type[BaseModel], loc: Sequence[int | str]) -> str | None:
    """The known key most like the unknown one at ``loc`` (its siblings' names)."""
    siblings = _keys_at(model, loc[:-1])
    found = difflib.get_close_matches(str(loc[-1]), siblings, n=1, cutoff=0.75)
    return found[0] if found else None


def _keys_at(model: type[BaseModel], parents: Sequence[int | str]) -> list[str]:
    """The keys the section at ``parents`` takes (empty where it cannot be told)."""
    current: type[BaseModel] | None = model
    for part in parents:
        if current is None or isinstance(part, int):
            continue  # a list item: the same section as the list's
        field = current.model_fields.get(str(part))
        current = _section_of(field.annotation) if field is not None else None
    if current is None:
        return []
    return [field.alias or name for name, field in current.model_fields.items()]


def _section_of(annotation: object) -> type[BaseModel] | None:
    """The pydantic section inside ``X``, ``X | None`` or ``list[X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        for argument in typing.get_args(annotation):
            if (section := _section_of(argument)) is not None:
                return section
    return None
