"""Library configs declared once.

A config is a frozen, keyword-only dataclass. Each field's annotation carries
its allowed range (``annotated_types`` bounds such as ``Interval(ge=1)``) or its
choices (``Literal``); its default is the dataclass default and its docstring
gives units and the values the papers used. :func:`check_fields` enforces the
annotations when the library builds a config itself (``__post_init__``), and the
params schema (:mod:`zeroloop.pipeline.params`) turns the same annotations into
the validation of params.yaml, so a range is written in exactly one place.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at

__all__ = ["Annotated", "at", "check_fields", "config_fields"]


@cache
def config_fields(cls: type) -> dict[str, tuple[Any, Any]]:
    """``name -> (annotation with its metadata, default)`` for a config dataclass."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = ...
        out[f.name] = (hints[f.name], default)
    return out


def _problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` breaks ``hint``'s bounds or choices, or None."""
    if get_origin(hint) is Annotated:
        base, *meta = get_args(hint)
        if value is None:
            return None
        for m in meta:
            for bound in (m if isinstance(m, at.Interval) else [m]):
                bad = _bound_problem(value, bound)
                if bad:
                    return bad
        return _problem(value, base)
    if get_origin(hint) in (Union, types.UnionType):  # ``X | None``: check against X
        if value is None:
            return None
        return next((p for p in map(lambda h: _problem(value, h), get_args(hint)) if p), None)
    if get_origin(hint) is Literal and value not in get_args(hint):
        return f"must be one of {', '.join(map(repr, get_args(hint)))}"
    return None


def _bound_problem(value: Any, bound: Any) -> str | None:
    checks = ((at.Ge, "ge", ">=", lambda v, b: v >= b), (at.Gt, "gt", ">", lambda v, b: v > b),
              (at.Le, "le", "<=", lambda v, b: v <= b), (at.Lt, "lt", "<", lambda v, b: v < b))
    for kind, attr, sign, ok in checks:
        if isinstance(bound, kind) and not ok(value, getattr(bound, attr)):
            return f"must be {sign} {getattr(bound, attr)}"
    return None


def check_fields(obj: Any, prefix: str) -> None:
    """Raise ``ValueError`` naming ``prefix.field`` for a value outside its bounds."""
    for name, (hint, _) in config_fields(type(obj)).items():
        value = getattr(obj, name)
        bad = _problem(value, hint)
        if bad:
            raise ValueError(f"{prefix}.{name}={value!r}: {bad}")
