import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.pipeline.data.storage import DamagedFileError, load_model, read_model_header, save_model


def small_net(game):
    torch.manual_seed(0)
    return PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))


def test_model_round_trip(tmp_path):
    game = make_game("connect4")
    net = small_net(game)
    path = tmp_path / "m.pt"
    save_model(path, net, game, {"generation": 3})
    loaded, g2, meta = load_model(path)
    assert g2.name == "connect4" and meta == {"generation": 3}
    x = torch.from_numpy(game.encode([game.initial_state()]))
    net.eval()
    loaded.eval()
    with torch.no_grad():
        for a, b in zip(net(x), loaded(x)):
            torch.testing.assert_close(a, b)
    assert read_model_header(path)["net"]["channels"] == 8
    assert not list(tmp_path.glob(".*tmp"))  # the temporary file was renamed away


def test_damaged_model_files_are_named(tmp_path):
    game = make_game("tictactoe")
    path = tmp_path / "m.pt"
    save_model(path, small_net(game), game)
    raw = bytearray(path.read_bytes())
    flipped = tmp_path / "flipped.pt"
    raw[-10] ^= 0xFF
    flipped.write_bytes(bytes(raw))
    with pytest.raises(DamagedFileError, match="flipped.pt: checksum mismatch"):
        load_model(flipped)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DamagedFileError, match="cut.pt: truncated"):
        load_model(cut)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"hello")
    with pytest.raises(DamagedFileError, match="junk.pt: not a zeroloop model"):
        load_model(junk)
    with pytest.raises(ValueError, match="is for 'tictactoe', not 'connect4'"):
        load_model(path, make_game("connect4"))
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_model(tmp_path / "nope.pt")


def test_net_shapes():
    for name in ("tictactoe", "connect4", "gomoku-8x8-5", "othello"):
        game = make_game(name)
        net = small_net(game)
        x = torch.from_numpy(game.encode([game.initial_state()] * 3))
        logits, v = net(x)
        assert logits.shape == (3, game.num_actions) and v.shape == (3,)
        assert np.all(np.abs(v.detach().numpy()) < 1)


def test_a_model_made_with_a_removed_head_is_refused_naming_the_option(tmp_path, monkeypatch):
    """net.opponent_policy left the code in issue 50: a model file that still records it says so
    in one line, naming the file and the commit whose code reads it, not a TypeError."""
    game = make_game("tictactoe")
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
    monkeypatch.setattr(NetConfig, "to_dict", lambda self: {"blocks": 1, "channels": 8, "value_hidden": 8,
                                                           "opponent_policy": True})
    path = tmp_path / "old.pt"
    save_model(path, net, game)
    monkeypatch.undo()
    with pytest.raises(DamagedFileError, match=r"old.pt: made with network options .*\(opponent_policy; "
                                               r"removed in issue 50.*cdcab39"):
        load_model(path)
