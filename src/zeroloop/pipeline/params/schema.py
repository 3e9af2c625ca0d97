"""params.yaml's schema, derived from the library configs.

Each section that configures library code is built from that code's config
dataclass by :func:`config_section`: the same keys, defaults and bounds (the
dataclass annotations), so a knob is declared once, in the library, and every
knob the library has is reachable and validated here. ``section.config()``
gives the library object: the one seam from params.yaml to the code.

| section    | library config                                  |
|------------|-------------------------------------------------|
| ``net``    | :class:`zeroloop.engine.nn.NetConfig`           |
| ``mcts``   | :class:`zeroloop.engine.search.SearchConfig`    |
| ``selfplay`` | :class:`zeroloop.engine.selfplay.SelfplayConfig` |
| ``train``  | :class:`zeroloop.pipeline.training.config.TrainConfig` |
| ``gate``, ``evaluate`` | :class:`zeroloop.engine.arena.MatchConfig` plus their own keys |
| ``gate.sprt`` | :class:`zeroloop.engine.rating.GateTest` plus ``enabled``, ``round_games`` |

The other sections belong to the pipeline alone: ``generations`` (the unrolled
chain ``{g: {prev: g - 1}}``), ``tune`` (``zeroloop tune``), ``runtime``
(device, workers, games in flight, cache, the worker backend: they do not
change results on a device, so no stage lists them as a DVC dependency; ``runtime.precision`` does,
and the stages that search list it) and ``mlflow``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)

from zeroloop.engine.arena import MatchConfig, even_games
from zeroloop.engine.config import Annotated, at, config_fields
from zeroloop.engine.games import GAME_NAMES, Game, make_game
from zeroloop.engine.nn import NetConfig
from zeroloop.engine.nn.net import unused_keys
from zeroloop.engine.rating import SPRT, GateTest
from zeroloop.engine.search import SearchConfig
from zeroloop.engine.selfplay import SelfplayConfig
from zeroloop.pipeline.runtime.backend import Backend
from zeroloop.pipeline.training.config import TrainConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigSection(_Section):
    """A section derived from a library config (see :func:`config_section`)."""

    library_config: ClassVar[type]
    #: this section's own defaults for some of the library config's fields (see :func:`config_section`)
    own_defaults: ClassVar[dict] = {}

    def config(self) -> Any:
        """The library config these keys describe."""
        cls = self.library_config
        left = self._library_default_keys()
        return cls(**{k: getattr(self, k) for k in config_fields(cls) if k not in left})

    def _library_default_keys(self) -> set[str]:
        """Fields left to the library's default rather than this section's value."""
        return set()

    @model_validator(mode="after")
    def _library_checks(self) -> ConfigSection:
        self.config()  # checks that span fields live in the config's __post_init__
        return self


def config_section(cls: type, name: str, *, leading: dict | None = None, validators: dict | None = None,
                   defaults: dict | None = None, base: type[ConfigSection] = ConfigSection,
                   **extra: Any) -> type[ConfigSection]:
    """A pydantic section with ``cls``'s fields (annotations, bounds, defaults),
    after the ``leading`` and before the ``extra`` pipeline-only fields
    (``name=(annotation, default)``). ``defaults`` gives this section its own
    default for some of ``cls``'s fields, where two sections share one config
    (the gate and the evaluation are both matches)."""
    lib = config_fields(cls)
    fields = {**(leading or {}), **lib,
              **{k: (lib[k][0], v) for k, v in (defaults or {}).items()}, **extra}
    model = create_model(name, __base__=base, __doc__=cls.__doc__, __validators__=validators or {},
                         **fields)
    model.library_config = cls
    model.own_defaults = dict(defaults or {})
    return model


def _gnugo_levels(v: int | list[int]) -> int | list[int]:
    levels = [v] if isinstance(v, int) else v
    if any(not 1 <= x <= 10 for x in levels) and v != 0:
        raise ValueError("needs a GnuGo level 1-10 (0: none) or a list of them")
    return v


def _even_validator():
    return {"_even": field_validator("games")(classmethod(lambda cls, v: _even(v)))}


def _even(v: int) -> int:
    try:
        return even_games(v)
    except ValueError:
        raise ValueError("must be even (games are colour-balanced pairs)") from None


class _NetSection(ConfigSection):
    """The net's section: its own shape defaults (``blocks``, ``channels``) shape the kinds they
    belong to; another kind (``kind: mlp``) leaves them at their values unread, as the library
    does its own defaults, and still refuses any other value of them by name."""

    def _library_default_keys(self) -> set[str]:
        return {k for k in unused_keys(self.kind) if getattr(self, k) == self.own_defaults.get(k)}


# the pipeline's net: the 3x48 ResNet with global pooling, which beat the 5x64 (the engine's NetConfig
# default) at its CPU on two seeds (docs/lab/notebook.md, round 32) and runs twice its generations, with
# AlphaZero.jl's Connect Four heads (4 policy, 32 value channels: round 58)
NetParams = config_section(NetConfig, "NetParams", defaults={"kind": "gpool", "blocks": 3, "channels": 48,
                                                             "policy_channels": 4, "value_channels": 32},
                           base=_NetSection)
MCTSParams = config_section(SearchConfig, "MCTSParams")
SelfplayParams = config_section(SelfplayConfig, "SelfplayParams")
TrainParams = config_section(TrainConfig, "TrainParams")


SPRTParams = config_section(
    GateTest, "SPRTParams",
    leading={"enabled": (bool, Field(True, description=(
        "play the gate in rounds and stop once the sequential test reaches a verdict, which then "
        "decides; when gate.games run out first, the threshold decides")))},
    round_games=(Annotated[int, at.Interval(ge=2, le=100_000)], Field(20, description=(
        "games played between two looks at the test"))))


def _gate_validators():
    def sprt_fits_threshold(self):
        if self.sprt.enabled:
            self.sprt.config().sprt(self.threshold)  # an SPRT gate needs a threshold below 1
        return self

    return {**_even_validator(), "_sprt_fits_threshold": model_validator(mode="after")(sprt_fits_threshold)}


GateParams = config_section(
    MatchConfig, "GateParams", validators=_gate_validators(), defaults={"games": 100},
    threshold=(Annotated[float, at.Interval(gt=0, le=1)], Field(0.55, description=(
        "the score (wins + half the draws, a share of the games) at which the candidate replaces "
        "the best model"))),
    sprt=(SPRTParams, SPRTParams()))
EvaluateParams = config_section(
    MatchConfig, "EvaluateParams", validators=_even_validator(), defaults={"games": 30, "simulations": 200},
    uct_playouts=(Annotated[int, at.Interval(ge=1, le=1_000_000)], Field(1000, description=(
        "playouts per move of the rollout-UCT baseline (the Elo anchor, named uct<playouts>)"))),
    perfect_games=(bool, Field(True, description="tic-tac-toe: also play the perfect player")),
    gnugo_level=(Annotated[int | list[int], AfterValidator(_gnugo_levels)], Field(0, description=(
        "Go: also play GnuGo at this level (1-10; GnuGo's default is 10), or at each level of a list "
        "such as [1, 10], over GTP, baselines on the same Elo scale (Debian's gnugo, `make gnugo`; "
        "where it is missing the evaluation says so and skips it); 0 or []: not"))),
    positions_per_group=(Annotated[int, at.Interval(ge=0, le=100_000)], Field(100, description=(
        "solver-labelled validation positions per group, measured every generation and the ones "
        "ablations and tuning may choose on (Connect Four: Pons' six groups, with the solver extra; "
        "tic-tac-toe: one group); 0: none"))),
    positions_seed=(Annotated[int, at.Interval(ge=0, le=2**63 - 1)], Field(0, description=(
        "the validation set's own seed, not the run's: runs with different seeds are measured on the "
        "same positions"))),
    test_positions_per_group=(Annotated[int, at.Interval(ge=0, le=100_000)], Field(300, description=(
        "held-out test positions per group, drawn apart from the validation set (none of its "
        "positions) and measured once, on the champion (the `test` stage): the set final tables "
        "report; 0: none"))),
    test_positions_seed=(Annotated[int, at.Interval(ge=0, le=2**63 - 1)], Field(1, description=(
        "the held-out test set's own seed"))))


class FloatRange(_Section):
    """A float search range: sampled between ``low`` and ``high``, on a log
    scale when ``log`` is true."""

    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if not self.low < self.high or (self.log and self.low <= 0):
            raise ValueError(f"needs low < high (and low > 0 with log), got {self.low}..{self.high}")
        return self


class IntRange(_Section):
    """An int search range: sampled from ``low`` to ``high``, both included."""

    low: int = Field(ge=0)
    high: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if not self.low < self.high:
            raise ValueError(f"needs low < high, got {self.low}..{self.high}")
        return self


class TuneParams(_Section):
    """Optuna search space and trial budget for ``zeroloop tune`` (not a DVC dependency).

    c_puct: range of ``mcts.c_puct``.
    temperature, temperature_moves: ranges of the move-sampling schedule (search
        objective: the tuned player's in its games; selfplay objective: self-play's).
    simulations: search objective: simulations per move of the tuned player.
    opening_plies: random moves that open each pair of a trial's games (the same
        seeded openings for every trial).
    reference: metric match: the opponent, rollout UCT, random or greedy one-step.
    reference_playouts: playouts per move of the ``uct`` reference.
    pruner: ``median`` stops a trial whose running score is below the median of
        earlier trials at the same round (after 3 complete trials, never after the
        first round); ``hyperband`` runs Optuna's Hyperband (successive halving
        over brackets, the rounds or generations being the resource);
        ``wilcoxon`` pairs each round's score with the best trial's on the same
        openings (a signed-rank test; search objective only); ``none``.
    """

    c_puct: FloatRange = FloatRange(low=0.5, high=4.0, log=True)
    temperature: FloatRange = FloatRange(low=0.0, high=1.5)
    temperature_moves: IntRange = IntRange(low=0, high=30)
    dirichlet_alpha: FloatRange | None = Field(
        None, description="selfplay objective: also tune the root noise ({low: 0.1, high: 1, log: true})")
    dirichlet_epsilon: FloatRange | None = Field(
        None, description="selfplay objective: also tune the noise weight")
    selfplay_simulations: IntRange | None = Field(
        None, description="selfplay objective: also tune self-play's simulations per move "
                          "(mcts.simulations), sampled on a log scale; a trial's games per generation "
                          "scale with it so that games x simulations stays tune.selfplay_games x "
                          "mcts.simulations (an equal search budget)")
    games: int = Field(60, ge=2, description="games per trial, colour-balanced pairs")
    rounds: int = Field(5, ge=1, le=100, description="intermediate reports per trial (for pruning)")
    simulations: int = Field(100, ge=1, le=100_000)
    opening_plies: int = Field(2, ge=0, le=20)
    metric: Literal["match", "solver", "validation"] = Field(
        "match", description="match: score against the reference; solver: 1 - move error rate "
                             "against perfect play on tune.solver_positions fresh positions (tic-tac-toe; "
                             "Connect Four with the solver extra); validation: the same on the pipeline's "
                             "validation positions (data/positions.json, never the held-out test set)")
    solver_positions: int = Field(200, ge=2, le=100_000, description="positions for metric: solver")
    reference: Literal["uct", "random", "greedy"] = "uct"
    reference_playouts: int = Field(1000, ge=1)
    pruner: Literal["wilcoxon", "median", "hyperband", "none"] = "median"
    selfplay_generations: int = Field(2, ge=1, le=100,
                                      description="selfplay objective: generations per trial")
    selfplay_games: int = Field(100, ge=1, description="selfplay objective: games per generation")
    confirm_games: int = Field(200, ge=0, description="search objective: replay best and default settings on "
                                                      "fresh openings (0: skip)")

    @field_validator("games")
    @classmethod
    def _even(cls, v: int) -> int:
        return _even(v)

    @field_validator("confirm_games")
    @classmethod
    def _even_or_zero(cls, v: int) -> int:
        return v and _even(v)

    @field_validator("dirichlet_epsilon")
    @classmethod
    def _weight(cls, v: FloatRange | None) -> FloatRange | None:
        if v is not None and not 0 <= v.low < v.high <= 1:
            raise ValueError(f"needs 0 <= low < high <= 1, got {v.low}..{v.high}")
        return v


class GenerationParams(_Section):
    """One generation of the chain.

    prev: the generation it continues from, always g - 1 (0: the random network of ``init``).
    """

    prev: int = Field(ge=0)


class RuntimeParams(_Section):
    """Where work runs and how fast. Not a DVC dependency: on one device only
    ``precision`` changes results, and the stages that search list it."""

    device: str = Field("auto", description="auto (CUDA when torch sees it, else the CPU), cpu or cuda[:N]")
    workers: int = Field(0, ge=0, le=1024, description="0: one per core")
    games_in_flight: int = Field(128, ge=1, le=65536,
                                 description="self-play games each worker searches together (speed only)")
    eval_cache: int = Field(100_000, ge=0, le=100_000_000,
                            description="positions whose network answers a self-play worker remembers "
                                        "(speed only; 0: off)")
    precision: Literal["auto", "fp32", "bf16", "fp16", "int8"] = Field(
        "auto", description="the network's number format at inference: auto (the fastest one shown as "
                            "strong on this device, docs/speed.md), fp32, bf16, fp16 (CUDA only), int8 "
                            "(CPU only, ONNX Runtime). It changes the answers' last bits, so the games: "
                            "the stages that search list it")
    backend: Literal["local", "ray"] = Field(
        "local", description="where workers run: local processes or Ray tasks (the same results either way)")
    ray_address: str = Field(
        "", description="backend ray: '' joins RAY_ADDRESS or starts a Ray instance on this machine; "
                        "'auto' joins the cluster this machine is a node of; 'host:port' a head node's "
                        "address; 'ray://host:port' through Ray Client")
    ray_connect_timeout_s: float = Field(20.0, gt=0, le=3600,
                                         description="backend ray: seconds to wait for the head node at "
                                                     "ray_address before the stage stops with one line")
    ray_gpus_per_task: float = Field(1.0, ge=0, le=64,
                                     description="backend ray, network on CUDA: GPUs each task asks for "
                                                 "(0.5: two tasks share one)")

    def worker_backend(self) -> Backend:
        """The :class:`Backend` these settings name (GPUs asked for only when
        the network runs on CUDA)."""
        if self.backend == "local":
            return Backend()
        cuda = self.device.startswith("cuda")
        if self.device == "auto":
            from zeroloop.engine.nn.inference import resolve_device

            cuda = resolve_device("auto").type == "cuda"
        return Backend("ray", self.ray_address, self.ray_gpus_per_task if cuda else 0.0,
                       connect_timeout_s=self.ray_connect_timeout_s)

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, v: str) -> str:
        v = v.strip()
        if v in ("", "auto"):
            return v
        host, sep, port = v.removeprefix("ray://").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
            raise ValueError(f"must be '', auto, host:port or ray://host:port, got {v!r}")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "auto" and v != "cpu" and not v.startswith("cuda"):
            raise ValueError(f"must be auto, cpu or cuda[:N], got {v!r}")
        return v

    @model_validator(mode="after")
    def _fp16_needs_cuda(self) -> RuntimeParams:
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError("precision fp16 needs a CUDA device (about 20x slower than fp32 on the CPU); "
                             "use bf16 or fp32 with device cpu")
        if self.precision == "int8" and self.device.startswith("cuda"):
            raise ValueError(f"precision int8 runs on the CPU (ONNX Runtime), not on device {self.device}; "
                             "use bf16 or fp16 there")
        return self


class MLflowParams(_Section):
    """MLflow names: the experiment the pipeline logs to, the registered model."""

    experiment: str = Field("zeroloop", min_length=1,
                            description="the MLflow experiment of the pipeline's runs")
    model_name: str = Field("", description="registered model name; empty: zeroloop-<game>")


class Params(_Section):
    game: str = Field("connect4", description="the game: " + ", ".join(GAME_NAMES))
    seed: int = Field(0, ge=0, le=2**32 - 1, description=(
        "the run's seed: each stage and generation draws its own from it (the test positions have "
        "evaluate.positions_seed)"))
    net: NetParams = NetParams()
    mcts: MCTSParams = MCTSParams()
    selfplay: SelfplayParams = SelfplayParams()
    train: TrainParams = TrainParams()
    gate: GateParams = GateParams()
    evaluate: EvaluateParams = EvaluateParams()
    generations: dict[int, GenerationParams] = Field(
        default_factory=lambda: {g: GenerationParams(prev=g - 1) for g in range(1, 13)},
        description="the unrolled chain, one entry per generation g: \"g\": {prev: g - 1}; keys are quoted "
                    "(DVC's foreach drops numeric keys; parse_params insists); append one to train further")
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

    def match_search(self, match: GateParams | EvaluateParams) -> SearchConfig:
        """A network player's search in a gate or evaluation match: ``mcts``'s
        settings at the match's simulations (matches never add root noise)."""
        return replace(self.mcts.config(), simulations=match.simulations)

    def sprt(self) -> SPRT | None:
        """The gate's sequential test, or None when it is off."""
        return self.gate.sprt.config().sprt(self.gate.threshold) if self.gate.sprt.enabled else None

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
        if "net" in data:  # the keys that shape this kind of net: a resnet's match those before the kinds
            shaping = self.net.config().to_dict()
            data["net"] = {k: v for k, v in data["net"].items() if k in shaping}
            data["net"]["ownership"] = False  # removed in round 22; kept so older fingerprints still match
        if not sections and self.runtime.precision != "fp32":  # fp32 left out: older fingerprints still match
            data["precision"] = self.runtime.precision
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
