"""Presets: what a configuration changes from the defaults, and params.yaml written from one.

A preset (``presets/NAME.yaml``) holds only the keys that differ from the
defaults (the schema's, which the shipped params.yaml equals), with comments
that say why; ``generations: n`` stands for the chain of generations 1..n.
:func:`write_preset` writes a complete params.yaml from it: DVC needs every
key a stage lists to be present in the file, and a user reads every knob
there. A section in a preset merges key by key into the defaults' (nested
sections too); any other value, ``generations`` included, replaces the
default whole.

The file is written over the current params.yaml as its template: each key's
line keeps its comment and only its value changes, so the comments that
explain the defaults stay where they are. The header (the comment lines before
the first key) is the preset's own. Where params.yaml is missing or does not
have the shape of the defaults' file, the keys are written without comments.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from zeroloop.pipeline.data.storage import atomic_write_bytes
from zeroloop.pipeline.params.loading import REMOVED, ParamsError, parse_params, parse_yaml
from zeroloop.pipeline.params.schema import Params

#: where presets live, relative to the repository root
PRESETS_DIR = Path("presets")


def preset_path(name: str, presets_dir: str | Path = PRESETS_DIR) -> Path:
    """``presets/NAME.yaml`` for a name, or the path itself for a file path."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        return Path(name)
    return Path(presets_dir) / f"{name}.yaml"


def preset_names(presets_dir: str | Path = PRESETS_DIR) -> list[str]:
    return sorted(p.stem for p in Path(presets_dir).glob("*.yaml"))


def read_preset(path: str | Path) -> tuple[dict, list[str]]:
    """A preset's keys and its header (the comment lines before its first key)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        names = preset_names(path.parent) if path.parent.is_dir() else []
        raise ParamsError(f"{path}: no such preset" + (f" (presets: {', '.join(names)})" if names else "")
                          ) from None
    data = parse_yaml(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: expected a mapping of sections, got {type(data).__name__}")
    header = []
    for line in text.splitlines():
        if line.startswith("#") or (not line.strip() and header):
            header.append(line)
        else:
            break
    while header and not header[-1].strip():
        header.pop()
    gens = data.get("generations")
    if isinstance(gens, int) and not isinstance(gens, bool):  # a preset's shorthand for the chain 1..n
        if gens < 1:
            raise ParamsError(f"{path}: generations: {gens} must be at least 1 (the chain 1..n)")
        data["generations"] = {str(g): {"prev": g - 1} for g in range(1, gens + 1)}
    return data, header


def merged(defaults: dict, preset: dict) -> dict:
    """``defaults`` with ``preset`` over it: a section (a mapping of the
    defaults other than ``generations``) merges key by key, anything else is
    replaced whole."""
    out = dict(defaults)
    for key, value in preset.items():
        base = defaults.get(key)
        if isinstance(base, dict) and isinstance(value, dict) and key != "generations" and _is_section(base):
            out[key] = merged(base, value)
        else:
            out[key] = value
    return out


def _is_section(value: dict) -> bool:
    # a section maps keys to settings; a search range of tune ({low, high, log}) is one value
    return not {"low", "high"} <= set(value)


def preset_params(name: str, presets_dir: str | Path = PRESETS_DIR) -> tuple[Params, list[str]]:
    """The configuration a preset makes (validated) and its header."""
    path = preset_path(name, presets_dir)
    data, header = read_preset(path)
    return parse_params(merged(DEFAULTS.to_yaml_data(), data), str(path)), header


#: the configuration a run has when params.yaml sets nothing
DEFAULTS = Params()


def write_preset(name: str, out: str | Path = "params.yaml", presets_dir: str | Path = PRESETS_DIR) -> Params:
    """Write ``out`` as the defaults with preset ``name`` over them; returns
    the configuration written."""
    params, header = preset_params(name, presets_dir)
    out = Path(out)
    command = f"# Written by `make preset NAME={name}` (zeroloop preset)."
    template = out.read_text() if out.is_file() else ""
    atomic_write_bytes(out, render(params, [*header, command], template).encode())
    return params


def render(params: Params, header: list[str], template: str = "") -> str:
    """params.yaml's text for ``params``: ``template``'s lines with their
    values replaced (comments kept), or plain YAML where the template does not
    fit (missing, without one of the sections, or a line this cannot read);
    either way the text reads back as ``params``."""
    data = params.to_yaml_data()
    body = _fill(template, data, DEFAULTS.to_yaml_data()) if template else None
    if body is not None and not _reads_back(body, params):
        body = None
    if body is None:
        body = yaml.safe_dump(data, sort_keys=False, width=110)
    return "\n".join(header) + "\n" + body


def _reads_back(text: str, params: Params) -> bool:
    try:
        return parse_params(yaml.safe_load(text)) == params
    except (yaml.YAMLError, ParamsError):
        return False


_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_\"']+):(?P<gap> *)"
                   r"""(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^#]*?)(?P<comment> *#.*)?$""")


def _fill(template: str, data: dict, defaults: dict) -> str | None:
    """The template's key lines with ``data``'s values, every other line as it
    is; a key the template lacks (an optional one, such as ``runtime.backend``)
    is added at the end of its section when its value is not the default, and
    the line of a key that left the code (:data:`REMOVED`) is dropped. None
    when the template has a key ``data`` lacks, or lacks a section."""
    lines = template.splitlines()
    first = next((i for i, line in enumerate(lines) if _LINE.match(line)), None)
    if first is None:
        return None
    out: list[str] = []
    path: list[tuple[int, str]] = []  # (indent, key) of the open sections
    seen: set[tuple[str, ...]] = set()
    ends: dict[tuple[str, ...], int] = {}  # a section's last line in out, for the keys it lacks
    whole = -1  # indent of a value written whole (generations): its old lines are dropped
    for line in lines[first:]:
        stripped = line.strip()
        if whole >= 0:
            if stripped and _indent(line) > whole:
                continue
            whole = -1
        m = _LINE.match(line)
        if not stripped or stripped.startswith("#") or not m:
            out.append(line)
            continue
        indent, key, comment = len(m["indent"]), m["key"].strip("\"'"), m["comment"] or ""
        while path and path[-1][0] >= indent:
            path.pop()
        keys = tuple(k for _, k in path) + (key,)
        if ".".join(keys) in REMOVED:
            continue
        try:
            value = _lookup(data, keys)
        except KeyError:
            return None
        if keys == ("generations",):
            out.append(f"{m['indent']}{key}:{m['gap']}{comment}".rstrip())
            out.extend(f'{m["indent"]}  "{g}": {_flow(v)}' for g, v in value.items())
            seen.add(keys)
            whole = indent
            continue
        if not m["value"].strip() and isinstance(value, dict) and _is_section(value):
            out.append(line)  # a section's head: its keys follow on their own lines
            path.append((indent, key))
            ends[keys] = len(out)
            continue
        old = m["value"].strip()
        if _same(old, value, _lookup(defaults, keys)):
            out.append(line)
        else:
            start = f"{m['indent']}{key}: {_flow(value)}"
            column = m.start("comment") + len(comment) - len(comment.lstrip()) if comment else 0
            out.append(start + (" " * max(1, column - len(start)) + comment.lstrip() if comment else ""))
        seen.add(keys)
        for n in range(1, len(keys)):
            ends[keys[:n]] = len(out)
    if seen - set(_leaves(data, ())) or any((k,) not in ends and (k,) not in seen for k in data):
        return None
    added: dict[int, list[str]] = {}
    for keys in _leaves(data, ()):
        if keys in seen or _lookup(data, keys) == _lookup(defaults, keys):
            continue
        if keys[:-1] not in ends:
            return None
        added.setdefault(ends[keys[:-1]], []).append(f"{'  ' * (len(keys) - 1)}{keys[-1]}: "
                                                      f"{_flow(_lookup(data, keys))}")
    for at in sorted(added, reverse=True):
        out[at:at] = added[at]
    return "\n".join(out).rstrip("\n") + "\n"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _lookup(data: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if not isinstance(data, dict) or k not in data:
            raise KeyError(k)
        data = data[k]
    return data


def _leaves(value: Any, keys: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The keys of every value with a line of its own in params.yaml."""
    if isinstance(value, dict) and (not keys or _is_section(value)) and keys != ("generations",):
        return [leaf for k, v in value.items() for leaf in _leaves(v, keys + (k,))]
    return [keys]


def _same(text: str, value: Any, default: Any) -> bool:
    """Whether ``text`` already says ``value``: the same number (70 is 70.0,
    true is not 1), or a mapping whose left-out keys have their defaults."""
    try:
        old = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    if isinstance(old, dict) and isinstance(value, dict) and isinstance(default, dict):
        old = {**default, **old}
    return old == value and isinstance(old, bool) == isinstance(value, bool)


def _flow(value: Any) -> str:
    """A value as a YAML flow scalar, list or mapping on one line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return yaml.safe_dump(value).split("\n")[0]
        text = repr(value)  # YAML 1.1 reads 1e-05 as a string: its exponent needs a point before it
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        plain = value and yaml.safe_load(value) == value and not re.search(r"[:#{}\[\],&*!|>'\"%@`]", value)
        return value if plain else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} to params.yaml")
