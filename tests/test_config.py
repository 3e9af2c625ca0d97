from pathlib import Path

import pytest
import yaml

from zeroloop.engine.nn import NetConfig
from zeroloop.pipeline.params import ParamsError, load_params, parse_params

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_params_yaml_is_complete_and_holds_the_defaults():
    path = ROOT / "params.yaml"
    raw = yaml.safe_load(path.read_text())
    # every key dvc.yaml lists must be in the file itself (DVC does not know our defaults)
    for section in ("game", "seed", "net", "mcts", "selfplay", "train", "gate", "evaluate", "generations"):
        assert section in raw, f"params.yaml lacks {section}"
    # one default per key: a key left out of params.yaml runs as the shipped file says
    assert load_params(path) == parse_params({})


def test_params_yaml_is_what_the_default_preset_writes(tmp_path):
    """`make preset NAME=connect4` on a fresh clone leaves params.yaml byte for byte as shipped,
    and so does going to another preset and back."""
    from zeroloop.pipeline.params.presets import write_preset

    shipped = (ROOT / "params.yaml").read_text()
    out = tmp_path / "params.yaml"
    out.write_text(shipped)
    write_preset("connect4", out, ROOT / "presets")
    assert out.read_text() == shipped
    p = write_preset("go-7", out, ROOT / "presets")
    assert load_params(out) == p and p.game == "go-7" and len(p.generations) == 10
    assert "dirichlet_alpha: 0.2  # root noise" in out.read_text()  # the line keeps its comment
    write_preset("connect4", out, ROOT / "presets")
    assert out.read_text() == shipped


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "presets").glob("*.yaml")))
def test_presets_are_valid_and_hold_only_what_differs_from_the_defaults(name, tmp_path):
    from zeroloop.pipeline.params.presets import read_preset, write_preset

    data, header = read_preset(ROOT / "presets" / f"{name}.yaml")
    assert header, f"presets/{name}.yaml says nothing of what it is for"
    defaults = parse_params({}).to_yaml_data()

    def same(keys, value, default):
        if isinstance(value, dict) and isinstance(default, dict) and keys != ("generations",) \
                and not {"low", "high"} <= set(default):
            for k, v in value.items():
                same(keys + (k,), v, default[k])
        else:
            assert value != default, f"presets/{name}.yaml repeats the default of {'.'.join(keys)}"

    for key, value in data.items():
        same((key,), value, defaults[key])
    out = tmp_path / "params.yaml"
    p = write_preset(name, out, ROOT / "presets")
    assert load_params(out, complete=True) == p


def test_a_preset_with_a_bad_key_names_the_preset_file(tmp_path):
    from zeroloop.pipeline.params.presets import write_preset

    (tmp_path / "mine.yaml").write_text("# mine\nmcts: {cpuct: 2}\n")
    with pytest.raises(ParamsError, match=r"mine.yaml: unknown key 'mcts.cpuct'"):
        write_preset("mine", tmp_path / "params.yaml", tmp_path)
    assert not (tmp_path / "params.yaml").exists()
    with pytest.raises(ParamsError, match="no such preset"):
        write_preset("nope", tmp_path / "params.yaml", tmp_path)


@pytest.mark.parametrize("data, expected", [
    ({"mcts": {"cpuct": 2}}, "unknown key 'mcts.cpuct' (allowed: simulations, c_puct,"),
    ({"colour": 1}, "unknown key 'colour' (allowed: game, seed,"),
    ({"gate": {"sprt": {"alfa": 0.1}}}, "unknown key 'gate.sprt.alfa' (allowed: enabled, elo_width"),
    ({"gate": {"threshold": 1.5}}, "gate.threshold: Input should be less than or equal to 1 (got 1.5)"),
    ({"mcts": {"simulations": 0}}, "mcts.simulations: Input should be greater than or equal to 1 (got 0)"),
    ({"train": {"optimizer": "rmsprop"}},
     "train.optimizer: Input should be 'adam', 'adamw' or 'sgd' (got 'rmsprop')"),
    ({"game": "chess"}, "game: unknown game; allowed: tictactoe, connect4"),
    ({"gate": {"games": 7}}, "gate.games: must be even"),
    ({"generations": {1: {"prev": 0}}}, "generations: key 1 must be a quoted number"),
    ({"generations": {"1": {"prev": 0}, "3": {"prev": 2}}}, "generation 2 is missing before generation 3"),
    ({"generations": {"1": {"prev": 0}, "2": {"prev": 0}}}, "generation 2: prev must be 1, got 0"),
    ({"runtime": {"device": "tpu"}}, "runtime.device: must be auto, cpu or cuda[:N]"),
    ({"runtime": {"device": "cpu", "precision": "fp16"}}, "precision fp16 needs a CUDA device"),
    ({"runtime": {"precision": "half"}}, "runtime.precision"),
    ({"seed": "x"}, "seed: Input should be a valid integer"),
    ({"mcts": {"algorithm": "gumbel"}}, "mcts.algorithm gumbel runs its sequential halving on a fresh tree"),
    ({"train": {"weight_decay": 0.01}}, "weight_decay=0.01 is AdamW's decoupled decay"),
    ({"selfplay": {"full_search_probability": 0}}, "selfplay.full_search_probability"),
    ({"train": {"replay_start": 2}},
     "'train.replay_start' was removed: the growing window measured level or worse in round 12 of the lab "
     "notebook; its code is at commit cdcab39 (delete the line)"),
    ({"net": {"ownership": True}},
     "'net.ownership' was removed: the area as an ownership target measured level on Go 7x7 in round 22 of "
     "the lab notebook (and on Connect Four in round 19); its code is at commit 72a4cf9 (delete the line)"),
    ({"net": {"soft_policy": True}},
     "'net.soft_policy' was removed: KataGo's soft policy head measured worse-leaning in round 28 of the lab "
     "notebook; its code is at commit aacb397 (delete the line)"),
    ({"selfplay": {"policy_surprise": 0.5}},
     "'selfplay.policy_surprise' was removed: KataGo's policy surprise weighting measured level in round 29 "
     "of the lab notebook; its code is at commit 8792698 (delete the line)"),
    ({"evaluate": {"solver_positions": 5}},
     "unknown key 'evaluate.solver_positions'; renamed to 'evaluate.positions_per_group'"),
    ({"net": {"kind": "transformer"}},
     "net.kind: Input should be 'resnet', 'gpool' or 'mlp' (got 'transformer')"),
    ({"net": {"kind": "mlp", "blocks": 4}},
     "net: net.blocks=4 does not apply to net.kind 'mlp', shaped by net.hidden and net.layers; leave it out"),
    ({"net": {"hidden": 256}}, "net.hidden=256 does not apply to net.kind 'gpool'"),
    ({"net": {"kind": "resnet", "hidden": 256}}, "net.hidden=256 does not apply to net.kind 'resnet'"),
])
def test_bad_params_name_the_key_and_what_is_allowed(data, expected):
    with pytest.raises(ParamsError) as err:
        parse_params(data)
    msg = str(err.value)
    assert expected in msg
    assert msg.startswith("params.yaml: ") and "\n" not in msg
    assert msg.count("got ") <= 1 + msg.count("; "), "a value named twice"


def test_a_value_the_validator_names_is_not_named_again():
    with pytest.raises(ParamsError) as err:
        parse_params({"runtime": {"device": "tpu"}})
    assert str(err.value) == "params.yaml: runtime.device: must be auto, cpu or cuda[:N], got 'tpu'"


def test_load_params_reports_file_problems(tmp_path):
    with pytest.raises(ParamsError, match="no such file"):
        load_params(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("game: connect4\nmcts: [1, 2\n")
    with pytest.raises(ParamsError, match=r"bad.yaml: not valid YAML at line \d"):
        load_params(bad)
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ParamsError, match="expected a mapping"):
        load_params(tmp_path / "list.yaml")


def test_fingerprint_ignores_generations_and_runtime_but_not_search():
    base = parse_params({})
    more = parse_params({"generations": {"1": {"prev": 0}, "2": {"prev": 1}}, "runtime": {"workers": 3}})
    other = parse_params({"mcts": {"c_puct": 2.0}})
    assert base.fingerprint() == more.fingerprint()
    assert base.fingerprint() != other.fingerprint()
    assert base.fingerprint() != parse_params({"runtime": {"precision": "bf16"}}).fingerprint()


def test_a_resnet_runs_fingerprint_is_what_it_was_before_the_net_kinds():
    """The MLflow run of a pipeline is found by its fingerprint: the keys that
    shape another kind of net (and a resnet's kind) are left out of it, so a
    resnet run made before the kinds is found again; the kinds and their
    shapes tell runs apart."""
    import hashlib
    import json

    before = {"net": {"blocks": 5, "channels": 64, "value_hidden": 64, "ownership": False}}
    resnet = {"kind": "resnet", "blocks": 5, "channels": 64, "policy_channels": 2, "value_channels": 1}
    assert parse_params({"net": resnet}).fingerprint("net") == hashlib.sha256(
        json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    nets = [resnet, {}, {"kind": "gpool", "channels": 64}, {"kind": "mlp"}, {"kind": "mlp", "hidden": 256},
            {"kind": "resnet", "blocks": 3}, {"policy_channels": 2, "value_channels": 1}]
    assert len({parse_params({"net": n}).fingerprint() for n in nets}) == len(nets)


def test_full_dump_round_trips_with_quoted_generation_keys():
    p = parse_params({"game": "tictactoe", "generations": {"1": {"prev": 0}, "2": {"prev": 1}}})
    data = p.to_yaml_data()
    assert list(data["generations"]) == ["1", "2"]
    assert parse_params(yaml.safe_load(yaml.safe_dump(data))) == p


SEAM = [("net", "NetConfig"), ("mcts", "SearchConfig"), ("selfplay", "SelfplayConfig"),
        ("train", "TrainConfig"),
        ("gate", "MatchConfig"), ("evaluate", "MatchConfig")]


@pytest.mark.parametrize("section", [s for s, _ in SEAM])
def test_every_library_knob_is_a_params_key_with_the_library_default(section):
    from zeroloop.engine.config import config_fields

    p = parse_params({})
    model = getattr(p, section)
    cfg = model.config()
    assert type(cfg).__name__ == dict(SEAM)[section]
    own = type(model).own_defaults  # the gate and the evaluation are matches with their own budgets
    assert set(own) <= set(config_fields(type(cfg))), own
    for name, (_, default) in config_fields(type(cfg)).items():
        assert name in type(model).model_fields, f"{section}.{name} is not reachable from params.yaml"
        assert getattr(model, name) == own.get(name, default) == getattr(cfg, name)


def test_params_values_reach_the_library_objects():
    p = parse_params({"mcts": {"simulations": 7, "fpu": -0.5, "c_base": 500, "reuse_tree": False},
                      "gate": {"simulations": 9, "temperature": 0.5, "temperature_moves": 3},
                      "train": {"optimizer": "sgd", "lr_schedule": "step", "batch_size": 8}})
    search = p.mcts.config()
    assert (search.simulations, search.fpu, search.c_base, search.reuse_tree) == (7, -0.5, 500.0, False)
    gate_search = p.match_search(p.gate)  # the gate's players search as mcts says, at the gate's budget
    assert gate_search.simulations == 9 and gate_search.fpu == -0.5 and gate_search.c_base == 500.0
    schedule = p.gate.config().schedule
    assert schedule.temperature_at(2) == 0.5 and schedule.temperature_at(3) == 0
    train = p.train.config()
    assert (train.optimizer, train.lr_schedule, train.batch_size) == ("sgd", "step", 8)
    net = parse_params({"net": {"kind": "mlp", "hidden": 128, "layers": 2}}).net.config()
    assert (net.kind, net.hidden, net.layers) == ("mlp", 128, 2)
    assert p.sprt() is not None  # on by default
    assert parse_params({"gate": {"sprt": {"enabled": False}}}).sprt() is None
    # the test's hypotheses straddle the gate's threshold: 60% is +70.4 Elo, width 20 puts them at 60.4, 80.4
    sprt = parse_params({"gate": {"threshold": 0.6, "sprt": {"enabled": True, "elo_width": 20}}}).sprt()
    assert (sprt.elo0, sprt.elo1) == pytest.approx((60.4, 80.4), abs=0.05)


def test_library_configs_refuse_values_outside_their_declared_range():
    from zeroloop.engine.search import SearchConfig
    from zeroloop.pipeline.training.config import TrainConfig

    with pytest.raises(ValueError, match="train.optimizer='rmsprop': must be one of 'adam', 'adamw', 'sgd'"):
        TrainConfig(optimizer="rmsprop")
    with pytest.raises(ValueError, match="mcts.fpu=2: must be <= 1"):
        SearchConfig(fpu=2)
    with pytest.raises(ParamsError, match="mcts.fpu: Input should be less than or equal to 1"):
        parse_params({"mcts": {"fpu": 2}})
    with pytest.raises(ParamsError, match="gate.sprt.elo_width: Input should be greater than 0"):
        parse_params({"gate": {"sprt": {"elo_width": -5}}})
    # the old keys say what replaced them: their meaning changed, so a silent rename would mislead
    with pytest.raises(ParamsError, match="unknown key 'gate.sprt.elo0'; replaced by 'gate.sprt.elo_width'"):
        parse_params({"gate": {"sprt": {"elo0": 0}}})
    with pytest.raises(ParamsError, match="'gate.sprt.var_floor'; replaced by 'gate.sprt.pair_var_floor'"):
        parse_params({"gate": {"sprt": {"var_floor": 0.05}}})
    with pytest.raises(ParamsError, match="gate: an SPRT gate needs a threshold in"):
        parse_params({"gate": {"threshold": 1.0, "sprt": {"enabled": True}}})


def test_strong_preset_is_the_defaults_run_longer_with_the_net_it_was_measured_with():
    """docs/strength.md measures presets/connect4-strong.yaml: the defaults for 18 generations, with
    the 5x64 ResNet of before round 32, AlphaZero's heads of before round 58 and the batch of 512 of
    before round 35 (not re-measured with the default's gpool 3x48, its heads or its batch of 128)."""
    from zeroloop.pipeline.params.presets import preset_params

    strong, _ = preset_params("connect4-strong", ROOT / "presets")
    assert len(strong.generations) == 18
    assert strong.net.config() == NetConfig() and (strong.net.kind, strong.net.blocks) == ("resnet", 5)
    measured = parse_params({"net": {"kind": "resnet", "blocks": 5, "channels": 64, "policy_channels": 2,
                                     "value_channels": 1},
                             "train": {"batch_size": 512}})
    assert strong.model_copy(update={"generations": measured.generations}) == measured


def test_the_default_net_is_round_32s_and_the_engines_stays_the_5x64():
    assert (parse_params({}).net.kind, parse_params({}).net.blocks, parse_params({}).net.channels) == (
        "gpool", 3, 48)
    assert len(parse_params({}).generations) == 12
    assert parse_params({}).train.batch_size == 128  # round 35
    assert (parse_params({}).net.policy_channels, parse_params({}).net.value_channels) == (4, 32)  # round 58
    assert (NetConfig().kind, NetConfig().blocks, NetConfig().channels) == ("resnet", 5, 64)


def test_an_older_params_file_names_every_removed_key_in_one_line_and_a_preset_rewrites_it(tmp_path):
    from zeroloop.pipeline.params.presets import write_preset

    shipped = (ROOT / "params.yaml").read_text()
    older = shipped.replace("  dedup: true", "  replay_start: 0\n  start_from: best\n  dedup: true")
    older = older.replace("  archive_starts: 0.0 ", "  late_simulations: 0\n  archive_starts: 0.0 ")
    out = tmp_path / "params.yaml"
    out.write_text(older)
    with pytest.raises(ParamsError) as err:
        load_params(out)
    msg = str(err.value)
    assert "\n" not in msg and "cdcab39" in msg and "make preset NAME=connect4" in msg
    for key in ("train.replay_start", "train.start_from", "selfplay.late_simulations"):
        assert f"'{key}'" in msg
    write_preset("connect4", out, ROOT / "presets")  # the removed keys' lines go, every comment stays
    assert out.read_text() == shipped


def test_a_written_params_file_reads_back_as_the_preset_whatever_the_template(tmp_path):
    from zeroloop.pipeline.params.presets import write_preset

    (tmp_path / "mine.yaml").write_text("# mine\ntrain: {l2: 0.00001}\nevaluate: {gnugo_level: [1, 10]}\n"
                                        "mlflow: {model_name: 'a#b'}\n")
    out = tmp_path / "params.yaml"
    for template in [(ROOT / "params.yaml").read_text(), "", "game: connect4\n", "net:\n  - 1\n"]:
        out.write_text(template)
        p = write_preset("mine", out, tmp_path)
        assert load_params(out) == p and p.train.l2 == 1e-5 and p.mlflow.model_name == "a#b"
        assert load_params(out, complete=True) == p
    write_preset("mine", out, tmp_path)  # written over itself: the same text
    assert out.read_text().count("a#b") == 1


def test_another_net_kind_needs_only_its_kind():
    """The default's shape (gpool 3x48) shapes a resnet too; an MLP does not see it, and a shape key
    written for the wrong kind is still refused (above)."""
    assert parse_params({"net": {"kind": "mlp"}}).net.config() == NetConfig(kind="mlp")
    assert parse_params({"net": {"kind": "resnet"}}).net.config() == NetConfig(
        blocks=3, channels=48, policy_channels=4, value_channels=32)
    written = parse_params({"net": {"kind": "mlp", "blocks": 3, "channels": 48, "hidden": 256}})
    assert written.net.config() == NetConfig(kind="mlp", hidden=256)
