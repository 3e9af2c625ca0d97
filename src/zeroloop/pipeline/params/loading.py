"""Reading params.yaml: YAML, validation and one-line error messages.

Every section forbids unknown keys, so a typo such as ``mcts.cpuct`` stops a
stage with one line naming the key and the keys that are allowed; a bad value
names the key, the value and the allowed range. :func:`load_params` is the
only way stages read params.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from zeroloop.pipeline.params.schema import Params


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or invalid; the message is one line."""


def _describe(err: dict, source: str) -> str:
    """One line for one pydantic error: key, value and what is allowed."""
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        model: type[BaseModel] = Params
        for part in loc[:-1]:
            field = model.model_fields.get(part)
            if field is None or not (isinstance(field.annotation, type)
                                     and issubclass(field.annotation, BaseModel)):
                model = None
                break
            model = field.annotation
        allowed = f" (allowed: {', '.join(model.model_fields)})" if model else ""
        if key in REMOVED:
            return (f"{source}: {key!r} was removed: {REMOVED[key]}; its code is at commit "
                    f"{REMOVED_AT.get(key, ISSUE_50_AT)} (delete the line)")
        renamed = (f"; renamed to {RENAMED[key]!r}" if key in RENAMED
                   else f"; replaced by {REPLACED[key]}" if key in REPLACED else "")
        return f"{source}: unknown key {key!r}{renamed}{allowed}"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] in ("missing",):
        return f"{source}: {key}: required key is missing"
    value = err.get("input")
    # a validator's own message may already name the value
    shown = "" if isinstance(value, dict) or f"got {value!r}" in msg else f" (got {value!r})"
    return f"{source}: {key}: {msg}{shown}" if key else f"{source}: {msg}"


#: keys of older params files and their names now
RENAMED = {"evaluate.solver_positions": "evaluate.positions_per_group"}
#: keys of older params files whose meaning changed, and what to write instead
_CENTRED = "'gate.sprt.elo_width': the hypotheses are centred on gate.threshold (docs/gate.md)"
REPLACED = {"gate.sprt.elo0": _CENTRED, "gate.sprt.elo1": _CENTRED,
            "gate.sprt.var_floor": "'gate.sprt.pair_var_floor': the floor of a game pair's variance, "
                                   "not a game's (half the old value means the same)"}


#: options that lost their ablation and left the code, with the round that measured them
#: (docs/lab/notebook.md); the last commit with a key's code is REMOVED_AT's, else ISSUE_50_AT (the last
#: commit with all of issue 50's removals)
ISSUE_50_AT = "cdcab39"
_ROUND_22 = "the area as an ownership target measured level on Go 7x7 in round 22 of the lab notebook"
REMOVED_AT = {"net.ownership": "72a4cf9", "train.ownership_weight": "72a4cf9", "net.soft_policy": "aacb397",
              "selfplay.policy_surprise": "8792698", "selfplay.opening_plies": "e052c37"}
_ROUND_12 = "level or worse in round 12 of the lab notebook"
REMOVED = {
    "net.opponent_policy": "the opponent-reply head measured level in round 18 of the lab notebook",
    "train.opponent_policy_weight": "the opponent-reply head measured level in round 18 of the lab notebook",
    "train.value_cut_ply": "the cut at sampled moves measured level in round 17 of the lab notebook",
    "selfplay.long_temperature_share": "half the games at temperature 30 measured worse in round 18 of the "
                                       "lab notebook",
    "selfplay.long_temperature_moves": "half the games at temperature 30 measured worse in round 18 of the "
                                       "lab notebook",
    "selfplay.late_simulations": "the smaller late search measured level in round 15 of the lab notebook",
    "selfplay.late_ply": "the smaller late search measured level in round 15 of the lab notebook",
    "train.replay_start": f"the growing window measured {_ROUND_12}",
    "train.replay_grow_every": f"the growing window measured {_ROUND_12}",
    "train.lr_generation_decay": f"the learning rate across generations measured {_ROUND_12}",
    "train.value_q_weight_late": f"the value weight by move number measured {_ROUND_12}",
    "train.value_q_weight_ply": f"the value weight by move number measured {_ROUND_12}",
    "train.value_q_weight_end": "the value weight across generations measured level in round 19 of the lab "
                                "notebook",
    "train.value_q_weight_until": "the value weight across generations measured level in round 19 of the "
                                  "lab notebook",
    "train.start_from": "training from the candidate was byte-identical in round 1 of the lab notebook; "
                        "training continues from the best model",
    "net.ownership": _ROUND_22 + " (and on Connect Four in round 19)",
    "train.ownership_weight": _ROUND_22,
    "net.soft_policy": "KataGo's soft policy head measured worse-leaning in round 28 of the lab notebook",
    "selfplay.policy_surprise": "KataGo's policy surprise weighting measured level in round 29 of the lab "
                                "notebook",
    "selfplay.opening_plies": "random opening plies in self-play searched level or worse in rounds 4, 8 and "
                              "10 of the lab notebook",
}


def parse_params(data: Any, source: str = "params.yaml") -> Params:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: expected a mapping of sections, got {type(data).__name__}")
    gens = data.get("generations")
    if isinstance(gens, dict):
        for k in gens:
            # DVC's foreach silently drops non-string keys, which would leave no stages at all
            if not isinstance(k, str) or not k.isdigit():
                raise ParamsError(f"{source}: generations: key {k!r} must be a quoted number, "
                                  f"e.g. \"{k}\": {{prev: ...}}")
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        gone = [".".join(map(str, e["loc"])) for e in errors if e["type"] == "extra_forbidden"
                and ".".join(map(str, e["loc"])) in REMOVED]
        if len(gone) > 1:  # an older params file: every such key in one line, not three and "+12 more"
            commits = sorted({REMOVED_AT.get(k, ISSUE_50_AT) for k in gone})
            raise ParamsError(f"{source}: {', '.join(repr(k) for k in gone)} were removed: options measured "
                              "level or worse (docs/pipeline.md, Removed options, names each one's round and "
                              f"commit); their code is at commit {' and '.join(commits)} (delete those "
                              "lines, or write the file anew with make preset NAME=connect4)") from None
        lines = [_describe(e, source) for e in errors[:3]]
        more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
        raise ParamsError("; ".join(lines) + more) from None


#: Sections that decide results: a stage refuses a params.yaml that leaves one out, rather than
#: quietly using defaults (DVC would not see the difference, and the outputs would lie).
RESULT_SECTIONS = ("game", "seed", "net", "mcts", "selfplay", "train", "gate", "evaluate", "generations")


def _written_twice(node: yaml.Node, path: tuple[str, ...] = (), seen: set | None = None
                   ) -> tuple[str, int] | None:
    """The first key written a second time in one mapping, as a dotted path,
    and the line of its second writing; None when every key is written once.
    PyYAML keeps the last silently, while DVC (ruamel) refuses the whole file,
    so a stage and ``dvc repro`` would read different things."""
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias of a node already walked
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if name in keys:
                    return ".".join((*path, name)), key.start_mark.line + 1
                keys.add(name)
            if found := _written_twice(value, (*path, name), seen):
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            if found := _written_twice(item, (*path, str(i)), seen):
                return found
    return None


def parse_yaml(text: str, path: str | Path) -> Any:
    """``text`` (the contents of ``path``) as YAML; :class:`ParamsError` with
    the line where it is not, or where a key is written a second time."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if twice := _written_twice(node):
            raise ParamsError(f"{path}: {twice[0]}: the key is written twice (again at line {twice[1]}); "
                              "YAML would keep the last and DVC refuses the file: delete one")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    finally:
        loader.dispose()


def load_params(path: str | Path = "params.yaml", *, complete: bool = False) -> Params:
    """Read and validate params.yaml; raises :class:`ParamsError` (one line).

    ``complete``: every section of :data:`RESULT_SECTIONS` must be written out
    (what the stages ask for); keys inside a section default to the library's
    documented defaults."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such file (run from the repository root)") from None
    data = parse_yaml(text, path)
    params = parse_params(data, str(path))
    if complete:
        if not data:
            raise ParamsError(f"{path}: empty; write it from a preset, e.g. make preset NAME=tictactoe")
        missing = [s for s in RESULT_SECTIONS if isinstance(data, dict) and s not in data]
        if missing:
            raise ParamsError(f"{path}: section {missing[0]!r} is missing; every section that decides "
                              f"results must be written out ({', '.join(RESULT_SECTIONS)})")
    return params
