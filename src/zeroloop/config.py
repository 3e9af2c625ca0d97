"""params.yaml as typed, validated configuration.

Every section is a pydantic model that forbids unknown keys, so a typo such as
``mcts.cpuct`` stops a stage with a one-line error naming the key and the keys
that are allowed; a bad value names the key, the value and the allowed range.
:func:`load_params` is the only way stages read params.yaml.

Sections and what reads them (dvc.yaml lists the same keys per stage):

* ``game``, ``seed``, ``net`` - every stage.
* ``mcts`` - the search used by self-play (with root noise).
* ``selfplay``, ``train``, ``gate``, ``evaluate`` - one stage each.
* ``generations`` - the unrolled generation chain: ``{g: {prev: g - 1}}``.
* ``tune`` - search space and budget of ``zeroloop tune`` (Optuna).
* ``runtime`` - where work runs (device, worker processes). It does not change
  results, so no stage lists it as a DVC dependency.
* ``mlflow`` - the experiment name and the registered model name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from zeroloop.games import GAME_NAMES, Game, make_game


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or invalid; the message is one line."""


def _even_games(v: int) -> int:
    if v % 2:
        raise ValueError("must be even (games are colour-balanced pairs)")
    return v


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetParams(_Section):
    """Residual network shape (AlphaZero: 19-20 blocks x 256 channels)."""

    blocks: int = Field(5, ge=1, le=40)
    channels: int = Field(64, ge=4, le=512)
    value_hidden: int = Field(64, ge=1, le=1024)


class MCTSParams(_Section):
    """Self-play search. AlphaZero: 800 simulations, c_puct (c_init) 1.25,
    epsilon 0.25, alpha ~ 10 / typical number of legal moves."""

    simulations: int = Field(100, ge=1, le=100_000)
    c_puct: float = Field(1.25, gt=0, le=100)
    dirichlet_alpha: float = Field(1.0, gt=0, le=100)
    dirichlet_epsilon: float = Field(0.25, ge=0, le=1)
    leaves_per_game: int = Field(1, ge=1, le=64)


class SelfplayParams(_Section):
    """Games per generation. Moves are sampled at ``temperature`` for the first
    ``temperature_moves`` plies, then the most-visited move is played."""

    games: int = Field(256, ge=1)
    temperature: float = Field(1.0, ge=0, le=10)
    temperature_moves: int = Field(10, ge=0)
    shard_games: int = Field(64, ge=1, le=4096)


class TrainParams(_Section):
    """Training on a replay window of the last ``replay_generations`` generations.

    Loss per sample: (z - v)^2 - pi . log p, plus ``l2 * ||theta||^2`` over all
    weights (explicit, so the optimiser's own weight decay is off).
    """

    replay_generations: int = Field(4, ge=1, le=1000)
    epochs: int = Field(4, ge=1, le=1000)
    batch_size: int = Field(256, ge=1, le=65536)
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = Field(2e-3, gt=0, le=10)
    lr_schedule: Literal["constant", "cosine", "step"] = "cosine"
    lr_step_epochs: int = Field(2, ge=1)
    lr_step_gamma: float = Field(0.3, gt=0, le=1)
    momentum: float = Field(0.9, ge=0, lt=1)
    l2: float = Field(1e-4, ge=0, le=1)
    augment: bool = True
    val_fraction: float = Field(0.05, ge=0, lt=0.5)


class SPRTParams(_Section):
    """Sequential test that may end a gate match early (off by default)."""

    enabled: bool = False
    elo0: float = 0.0
    elo1: float = Field(35.0, description="55% score is about +35 Elo")
    alpha: float = Field(0.05, gt=0, lt=0.5)
    beta: float = Field(0.05, gt=0, lt=0.5)

    @model_validator(mode="after")
    def _ordered(self) -> SPRTParams:
        if self.elo1 <= self.elo0:
            raise ValueError(f"elo1={self.elo1} must be greater than elo0={self.elo0}")
        return self


class MatchParams(_Section):
    """Settings for evaluation games: no root noise; each opening (``opening_plies``
    random moves) is played twice with colours swapped; moves are sampled at
    ``temperature`` for the first ``temperature_moves`` plies, then greedy."""

    games: int = Field(40, ge=2)
    simulations: int = Field(100, ge=1, le=100_000)
    opening_plies: int = Field(2, ge=0, le=20)
    temperature: float = Field(0.0, ge=0, le=10)
    temperature_moves: int = Field(0, ge=0)

    @field_validator("games")
    @classmethod
    def _even(cls, v: int) -> int:
        return _even_games(v)


class GateParams(MatchParams):
    threshold: float = Field(0.55, gt=0, le=1)
    sprt: SPRTParams = SPRTParams()


class EvaluateParams(MatchParams):
    """Baselines: random, rollout UCT with ``uct_playouts`` playouts a move,
    and (tic-tac-toe; Connect Four with the solver extra) perfect play."""

    uct_playouts: int = Field(400, ge=1, le=1_000_000)
    perfect_games: bool = True
    solver_positions: int = Field(200, ge=0, le=100_000)


class FloatRange(_Section):
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if not self.low < self.high or (self.log and self.low <= 0):
            raise ValueError(f"needs low < high (and low > 0 with log), got {self.low}..{self.high}")
        return self


class IntRange(_Section):
    low: int = Field(ge=0)
    high: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if not self.low < self.high:
            raise ValueError(f"needs low < high, got {self.low}..{self.high}")
        return self


class TuneParams(_Section):
    """Optuna search space and trial budget for ``zeroloop tune`` (not a DVC dependency)."""

    c_puct: FloatRange = FloatRange(low=0.5, high=4.0, log=True)
    temperature: FloatRange = FloatRange(low=0.0, high=1.5)
    temperature_moves: IntRange = IntRange(low=0, high=12)
    dirichlet_alpha: FloatRange | None = Field(
        None, description="selfplay objective: also tune the root noise ({low: 0.1, high: 1, log: true})")
    dirichlet_epsilon: FloatRange | None = Field(
        None, description="selfplay objective: also tune the noise weight")
    games: int = Field(60, ge=2, description="games per trial, colour-balanced pairs")
    rounds: int = Field(5, ge=1, le=100, description="intermediate reports per trial (for pruning)")
    simulations: int = Field(100, ge=1, le=100_000)
    opening_plies: int = Field(2, ge=0, le=20)
    metric: Literal["match", "solver"] = Field(
        "match", description="match: score against the reference; solver: 1 - move error rate "
                             "against perfect play (tic-tac-toe; Connect Four with the solver extra)")
    solver_positions: int = Field(200, ge=2, le=100_000, description="positions for metric: solver")
    reference: Literal["uct", "random", "greedy"] = "uct"
    reference_playouts: int = Field(1000, ge=1)
    pruner: Literal["wilcoxon", "median", "none"] = "median"
    selfplay_generations: int = Field(2, ge=1, le=100,
                                      description="selfplay objective: generations per trial")
    selfplay_games: int = Field(100, ge=1, description="selfplay objective: games per generation")
    confirm_games: int = Field(200, ge=0, description="search objective: replay best and default settings on "
                                                      "fresh openings (0: skip)")

    @field_validator("games")
    @classmethod
    def _even(cls, v: int) -> int:
        return _even_games(v)

    @field_validator("confirm_games")
    @classmethod
    def _even_or_zero(cls, v: int) -> int:
        return v and _even_games(v)

    @field_validator("dirichlet_epsilon")
    @classmethod
    def _weight(cls, v: FloatRange | None) -> FloatRange | None:
        if v is not None and not 0 <= v.low < v.high <= 1:
            raise ValueError(f"needs 0 <= low < high <= 1, got {v.low}..{v.high}")
        return v


class GenerationParams(_Section):
    prev: int = Field(ge=0)


class RuntimeParams(_Section):
    device: str = "auto"
    workers: int = Field(0, ge=0, le=1024, description="0: one per core")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "auto" and v != "cpu" and not v.startswith("cuda"):
            raise ValueError(f"must be auto, cpu or cuda[:N], got {v!r}")
        return v


class MLflowParams(_Section):
    experiment: str = Field("zeroloop", min_length=1)
    model_name: str = Field("", description="registered model name; empty: zeroloop-<game>")


class Params(_Section):
    game: str = "connect4"
    seed: int = Field(0, ge=0, le=2**32 - 1)
    net: NetParams = NetParams()
    mcts: MCTSParams = MCTSParams()
    selfplay: SelfplayParams = SelfplayParams()
    train: TrainParams = TrainParams()
    gate: GateParams = GateParams()
    evaluate: EvaluateParams = EvaluateParams()
    generations: dict[int, GenerationParams] = Field(default_factory=lambda: {1: GenerationParams(prev=0)})
    """Keys are quoted in params.yaml ("1": {prev: 0}); parse_params insists."""
    runtime: RuntimeParams = RuntimeParams()
    mlflow: MLflowParams = MLflowParams()
    tune: TuneParams = TuneParams()

    @field_validator("game")
    @classmethod
    def _game(cls, v: str) -> str:
        try:
            return make_game(v).name
        except ValueError:
            raise ValueError(f"unknown game; allowed: {', '.join(GAME_NAMES)}") from None

    @field_validator("generations")
    @classmethod
    def _chain(cls, v: dict[int, GenerationParams]) -> dict[int, GenerationParams]:
        if not v:
            raise ValueError("needs at least one generation, e.g. {1: {prev: 0}}")
        for g in sorted(v):
            if g < 1:
                raise ValueError(f"generation {g}: numbers start at 1 (0 is the random initial net)")
            if v[g].prev != g - 1:
                raise ValueError(f"generation {g}: prev must be {g - 1}, got {v[g].prev}")
            if g > 1 and g - 1 not in v:
                raise ValueError(f"generation {g - 1} is missing before generation {g}")
        return v

    def make_game(self) -> Game:
        return make_game(self.game)

    @property
    def last_generation(self) -> int:
        return max(self.generations)

    def registered_model_name(self) -> str:
        return self.mlflow.model_name or f"zeroloop-{self.game}"

    def fingerprint(self, *sections: str) -> str:
        """A short stable hash of the named sections (all result-relevant ones
        when none are named): identifies what produced a file or a run."""
        names = sections or ("game", "seed", "net", "mcts", "selfplay", "train", "gate", "evaluate")
        data = {k: _plain(getattr(self, k)) for k in names}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_yaml_data(self) -> dict[str, Any]:
        """Every key with its value, as params.yaml holds them (DVC needs each
        key a stage lists to be present in the file, defaults included)."""
        data = self.model_dump()
        data["generations"] = {str(g): v for g, v in data["generations"].items()}
        return data

    def flat(self) -> dict[str, Any]:
        """``section.key -> value`` for logging as run parameters."""
        out: dict[str, Any] = {}
        for key, value in self.model_dump(exclude={"generations", "tune"}).items():
            _flatten(key, value, out)
        out["generations"] = len(self.generations)
        return out


def _plain(v: Any) -> Any:
    return v.model_dump() if isinstance(v, BaseModel) else v


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


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
        return f"{source}: unknown key {key!r}{allowed}"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] in ("missing",):
        return f"{source}: {key}: required key is missing"
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    return f"{source}: {key}: {msg}{shown}" if key else f"{source}: {msg}"


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
        lines = [_describe(e, source) for e in errors[:3]]
        more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
        raise ParamsError("; ".join(lines) + more) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml; raises :class:`ParamsError` (one line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such file (run from the repository root)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    return parse_params(data, str(path))
