"""MkDocs hooks for the docs site (mkdocs.yml ``hooks:``).

The configuration reference is generated from the config models at build time, so the
page cannot promise a key, a default or a description the code does not have: in a page
holding one of ``MARKERS``, the marker becomes one table per section of that config.
"""

from __future__ import annotations

import enum
import importlib
import json
import re
import types
import typing
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKERS = {
    "<!-- config-reference server -->": ("gateway_bot.config.server", "ServerConfig", ""),
    "<!-- config-reference repo -->": ("gateway_bot.config.repo", "RepoConfig", "repo: "),
}

# Defaults that depend on the machine building the docs, shown as the rule instead.
SHOWN_DEFAULTS = {"state_dir": "`$XDG_STATE_HOME/gateway-bot` (`~/.local/state/gateway-bot`)"}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, (module, name, label) in MARKERS.items():
        if marker in markdown:
            model = getattr(importlib.import_module(module), name)
            markdown = markdown.replace(marker, config_reference(model, label))
    return markdown


def config_reference(model: type[BaseModel], label: str = "") -> str:
    """Every key of ``model`` as markdown: the top-level keys, then a table per section
    (its heading the key's path after ``label``, which keeps two configs' anchors apart)."""
    sections: list[tuple[str, type[BaseModel]]] = []
    parts = [_table("", model, sections, label)]
    while sections:
        path, section = sections.pop(0)
        parts.append(f"### {label}`{path}`\n\n")
        doc = " ".join((section.__doc__ or "").split()).replace("``", "`")
        if doc and section.__module__.startswith("gateway_bot"):
            parts.append(doc + "\n\n")
        parts.append(_table(path, section, sections, label))
    return "".join(parts)


def _table(
    path: str, model: type[BaseModel], sections: list[tuple[str, type[BaseModel]]], label: str
) -> str:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        nested = _model_in(field.annotation)
        if nested is not None:
            model_type, shape = nested
            where = key + {"one": "", "list": "[]", "dict": ".NAME"}[shape]
            sections.append((where, model_type))
            kind = {"one": "section", "list": "list of", "dict": "NAME ->"}[shape]
            type_cell = f"{kind} [`{where}`](#{_anchor(label + where)})"
            default = "" if shape == "one" else _cell(_default(key, field))
            rows.append(f"| `{name}` | {type_cell} | {default} | {_cell(field.description)} |")
            continue
        rows.append(
            f"| `{name}` | {_cell(_type_name(field.annotation))} | {_cell(_default(key, field))}"
            f" | {_cell(field.description)} |"
        )
    return "\n".join(rows) + "\n\n"


def _model_in(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The config model a field holds: alone or optional ("one"), in a list, in a dict."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "one"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        return _model_in(others[0]) if len(others) == 1 else None
    if origin is list and args:
        found = _model_in(args[0])
        return (found[0], "list") if found and found[1] == "one" else None
    if origin is dict and len(args) == 2:
        found = _model_in(args[1])
        return (found[0], "dict") if found and found[1] == "one" else None
    return None


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        limits = [_limit(meta) for meta in args[1:]]
        return " ".join([_type_name(args[0]), *[text for text in limits if text]])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"{_type_name(args[0])} -> {_type_name(args[1])}"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(json.dumps(member.value) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "path"
    name = getattr(annotation, "__name__", str(annotation))
    return "!secret NAME" if name == "SecretRef" else name


def _limit(meta: Any) -> str:
    for attribute, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        value = getattr(meta, attribute, None)
        if value is not None:
            return f"{sign} {value}"
    return ""


def _default(key: str, field: FieldInfo) -> str:
    if key in SHOWN_DEFAULTS:
        return SHOWN_DEFAULTS[key]
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return f"`{json.dumps(_plain(value))}`"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=False)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _cell(text: str | None) -> str:
    return (text or "").replace("``", "`").replace("|", "\\|").replace("\n", " ")


def _anchor(heading: str) -> str:
    """The id Python-Markdown's toc gives a heading of this text (its default slugify)."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())
