"""Stage entry points on bad input: one line naming the problem, exit 2, nothing written."""

import subprocess
import sys

import yaml

from zeroloop.pipeline.params import parse_params


def stage(cwd, *args):
    return subprocess.run([sys.executable, "-m", "zeroloop.pipeline.stages", *args], cwd=cwd,
                          capture_output=True,
                          text=True, timeout=300)


def _params(tmp_path, **changes):
    data = parse_params({"game": "tictactoe", **changes}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))


def test_unknown_params_key_stops_the_stage_with_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("game: tictactoe\nmcts:\n  cpuct: 2.0\n")
    out = stage(tmp_path, "init")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown key 'mcts.cpuct'" in lines[0] and "c_puct" in lines[0]
    assert not (tmp_path / "models").exists()


def test_damaged_model_is_named(tmp_path):
    _params(tmp_path)
    assert stage(tmp_path, "init").returncode == 0
    best = tmp_path / "models/generations/gen_0/best.pt"
    raw = bytearray(best.read_bytes())
    raw[-10] ^= 0xFF
    best.write_bytes(bytes(raw))
    (tmp_path / "models/generations/gen_1").mkdir(parents=True)
    (tmp_path / "models/generations/gen_1/candidate.pt").write_bytes(bytes(raw))
    out = stage(tmp_path, "gate", "--gen", "1", "--prev", "0")
    assert out.returncode == 2
    assert "models/generations/gen_0/best.pt: checksum mismatch" in out.stderr
    assert not (tmp_path / "models/generations/gen_1/best.pt").exists()


def test_generation_missing_from_params_is_reported(tmp_path):
    _params(tmp_path)
    out = stage(tmp_path, "evaluate", "--gen", "7")
    assert out.returncode == 2 and "generation 7 is not in params.yaml" in out.stderr
    out = stage(tmp_path, "selfplay", "--gen", "1")
    assert out.returncode == 2 and "needs --prev" in out.stderr
