"""params.yaml's reference, built from the schema: every key with its type,
default, allowed values and meaning, as markdown.

Nothing here is written by hand. Types, defaults and ranges come from the
pydantic models of :mod:`.schema` (so from the library configs' annotations);
meanings come from where the code states them: a field's ``description``, or
the ``name: text`` entries of its model's docstring (a library config's
docstring, for the sections derived from one). The documentation site's
``docs/params.md`` is this function's output (an MkDocs hook puts it there), and
the suite checks it covers every key of params.yaml and of the schema.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from zeroloop.pipeline.params.schema import FloatRange, IntRange, Params

COLUMNS = ("key", "type", "default", "allowed", "params.yaml", "meaning")

# ``name: text`` or ``a, b: text`` at the docstring's left margin; continuation lines are indented
_ENTRY = re.compile(r"^([a-z_][a-z0-9_]*(?:,\s*[a-z_][a-z0-9_]*)*):\s+(.*)$")


def docstring_meanings(doc: str | None) -> dict[str, str]:
    """``name -> text`` from a docstring's field entries (the convention of the
    library configs, e.g. :class:`~zeroloop.engine.search.SearchConfig`):
    ``name: text`` at the left margin, continued on indented lines; ``a, b: text``
    gives both names the same text. Other paragraphs are ignored."""
    out: dict[str, str] = {}
    names: list[str] = []
    for line in inspect.cleandoc(doc or "").splitlines():
        m = _ENTRY.match(line)
        if m:
            names = [n.strip() for n in m.group(1).split(",")]
            for n in names:
                out[n] = m.group(2).strip()
        elif names and line.startswith((" ", "\t")) and line.strip():
            for n in names:
                out[n] += " " + line.strip()
        else:
            names = []
    return out


def summary(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def _is_section(annotation: Any) -> bool:
    return (isinstance(annotation, type) and issubclass(annotation, BaseModel)
            and not issubclass(annotation, (FloatRange, IntRange)))


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(get_args(annotation)):
            return args[0], True
    return annotation, False


def _constraints(annotation: Any, metadata: list[Any]) -> tuple[Any, list[Any]]:
    """The bare type and every bound on it (field metadata and ``Annotated`` extras)."""
    found = list(metadata)
    while get_origin(annotation) is typing.Annotated:
        annotation, *extra = get_args(annotation)
        found.extend(extra)
    bounds: list[Any] = []
    for m in found:
        bounds.extend(m if isinstance(m, at.Interval) else [m])
    return annotation, bounds


def _number(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _allowed(base: Any, bounds: list[Any]) -> str:
    if get_origin(base) is Literal:
        return ", ".join(f"`{c}`" for c in get_args(base))
    if base in (FloatRange, IntRange):
        return "`low < high`" + (" (`log`: `low > 0`)" if base is FloatRange else "")
    lower = upper = ""
    parts = []
    for b in bounds:
        if isinstance(b, at.Ge) and b.ge is not None:
            lower = f"{_number(b.ge)} ≤ "
        elif isinstance(b, at.Gt) and b.gt is not None:
            lower = f"{_number(b.gt)} < "
        elif isinstance(b, at.Le) and b.le is not None:
            upper = f" ≤ {_number(b.le)}"
        elif isinstance(b, at.Lt) and b.lt is not None:
            upper = f" < {_number(b.lt)}"
        elif isinstance(b, at.MinLen):
            parts.append("non-empty" if b.min_length == 1 else f"at least {b.min_length} characters")
    if lower and not upper:  # "x ≥ 1" reads better than "1 ≤ x"
        value, sign = lower[:-3], {"≤": "≥", "<": ">"}[lower[-2]]
        parts.insert(0, f"x {sign} {value}")
    elif lower or upper:
        parts.insert(0, f"{lower}x{upper}")
    return ", ".join(parts)


def _type_name(base: Any) -> str:
    if get_origin(base) is Literal:
        return "choice"
    if base is FloatRange:
        return "range of float: `{low, high, log}`"
    if base is IntRange:
        return "range of int: `{low, high}`"
    return getattr(base, "__name__", str(base))


def _yaml(v: Any) -> str:
    if v is PydanticUndefined:
        return "required"
    if v is None:
        return "`null`"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, float):
        return f"`{v}`"
    if isinstance(v, str):
        return f"`{v}`" if v else '`""`'
    if isinstance(v, BaseModel):
        inner = ", ".join(f"{k}: {_yaml(x).strip('`')}" for k, x in v.model_dump().items())
        return f"`{{{inner}}}`"
    if isinstance(v, dict):
        inner = ", ".join(f"{k}: {_yaml(x).strip('`')}" for k, x in v.items())
        return f"`{{{inner}}}`"
    return f"`{_number(v)}`"


def _markdown(text: str) -> str:
    """reStructuredText-ish docstring text as one markdown table cell: code in
    single backticks, ``<`` and ``>`` escaped outside code, ``|`` escaped."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    parts = " ".join(text.replace("``", "`").split()).split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", ")")) else ".") if text else ""


def _lookup(data: Any, path: list[str]) -> Any:
    for p in path:
        if not isinstance(data, dict) or p not in data:
            return PydanticUndefined
        data = data[p]
    return data


#: how a table names the key of a mapping section (``generations: {"1": {prev: 0}, ...}``)
ENTRY_KEY = "<g>"


def _mapping_of_sections(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        return value if _is_section(value) else None
    return None


def _rows(model: type[BaseModel], prefix: str, yaml_data: Any,
          sections: list[tuple[str, type[BaseModel], str]]) -> list[tuple[str, ...]]:
    """The table rows of ``model``'s plain keys; its sections go to ``sections``
    as ``(key, model, lead)``."""
    meanings = docstring_meanings(model.__doc__)
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        meaning = field.description or meanings.get(name, "")
        if _is_section(field.annotation):
            sections.append((key, field.annotation, meaning))
            continue
        if (entry := _mapping_of_sections(field.annotation)) is not None:
            sections.append((f"{key}.{ENTRY_KEY}", entry, meaning))
            continue
        base, optional = _strip_optional(field.annotation)
        base, bounds = _constraints(base, field.metadata)
        allowed = _allowed(base, bounds)
        if optional:
            allowed = f"{allowed}, or `null`" if allowed else "any, or `null`"
        path = key.split(".")
        if ENTRY_KEY in path:  # a mapping section's key: every entry's value
            i = path.index(ENTRY_KEY)
            entries = _lookup(yaml_data, path[:i])
            values = [] if entries is PydanticUndefined else [
                _lookup(v, path[i + 1:]) for v in entries.values()]
            shipped = ", ".join(_yaml(v) for v in values) or PydanticUndefined
        else:
            shipped = _lookup(yaml_data, path)
            shipped = shipped if shipped is PydanticUndefined else _yaml(shipped)
        rows.append((f"`{key}`", _type_name(base), _yaml(field.default), allowed or "any",
                     "—" if shipped is PydanticUndefined else shipped, _markdown(meaning)))
    return rows


def _table(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def params_reference(yaml_data: dict | None = None) -> str:
    """Markdown: one table per section of params.yaml, every key with its type,
    its default (what a file that leaves the key out gets), the values
    allowed, its value in ``yaml_data`` (the repository's params.yaml; "—"
    where the file leaves the key out) and its meaning. Sections follow the
    schema's order; a nested section (``gate.sprt``) follows its parent."""
    sections: list[tuple[str, type[BaseModel], str]] = []
    out = ["## Top level", "", _table(_rows(Params, "", yaml_data, sections)), ""]
    while sections:
        key, model, lead = sections.pop(0)
        nested: list[tuple[str, type[BaseModel], str]] = []
        rows = _rows(model, f"{key}.", yaml_data, nested)
        library = getattr(model, "library_config", None)
        lead = _sentence(_markdown(lead or summary(model.__doc__)))
        if library is not None:
            lead += f" Library config: `{library.__module__}.{library.__qualname__}`."
        heading = "##" if key.count(".") == 0 or key.endswith(ENTRY_KEY) else "###"
        out += [f"{heading} `{key}`", "", lead, "", _table(rows), ""]
        sections[:0] = nested
    return "\n".join(out).rstrip() + "\n"


def documented_keys(markdown: str) -> set[str]:
    """The keys the reference's tables list (first column), e.g. ``gate.sprt.alpha``."""
    return set(re.findall(r"^\| `([^`]+)` \|", markdown, flags=re.M))


#: where :func:`fill_reference` puts the tables in ``docs/params.md``
MARKER = "<!-- params-reference -->"


def fill_reference(page: str, yaml_data: dict | None) -> str:
    """``page`` with its :data:`MARKER` replaced by :func:`params_reference`;
    raises ``ValueError`` when the page has no marker (the site would silently
    lose its reference)."""
    if MARKER not in page:
        raise ValueError(f"the params reference page has no {MARKER} marker")
    return page.replace(MARKER, params_reference(yaml_data))
