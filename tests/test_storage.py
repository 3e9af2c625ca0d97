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


@pytest.mark.parametrize("head, commit", [("opponent_policy", "cdcab39"), ("ownership", "72a4cf9"),
                                          ("soft_policy", "aacb397")])
def test_a_model_made_with_a_removed_head_is_refused_naming_the_option(tmp_path, monkeypatch, head, commit):
    """net.opponent_policy (issue 50), net.ownership (round 22) and net.soft_policy (round 28) left the
    code: a model file that still records one says so in one line, naming the file and the commit
    whose code reads it, not a TypeError."""
    game = make_game("tictactoe")
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
    monkeypatch.setattr(NetConfig, "to_dict", lambda self: {"blocks": 1, "channels": 8, "value_hidden": 8,
                                                           head: True})
    path = tmp_path / "old.pt"
    save_model(path, net, game)
    monkeypatch.undo()
    with pytest.raises(DamagedFileError, match=rf"old.pt: made with network options .*\({head}\); "
                                               rf"the code that reads it: {head} at commit {commit}$"):
        load_model(path)


@pytest.mark.parametrize("config", [
    NetConfig(kind="gpool", blocks=2, channels=8, value_hidden=8),
    NetConfig(kind="gpool", blocks=2, channels=8, policy_channels=4, value_channels=8, value_hidden=8),
    NetConfig(kind="mlp", hidden=16, layers=2, value_hidden=8)], ids=lambda c: c.shape)
def test_a_model_of_each_kind_round_trips_with_its_kind_in_the_header(tmp_path, config):
    game = make_game("connect4")
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, config).eval()
    path = tmp_path / "m.pt"
    save_model(path, net, game)
    assert read_model_header(path)["net"] == config.to_dict()
    assert read_model_header(path)["net"]["kind"] == config.kind
    loaded, _, _ = load_model(path)
    assert type(loaded) is type(net) and loaded.config == config
    x = torch.from_numpy(game.encode([game.initial_state()] * 2))
    with torch.no_grad():
        for a, b in zip(net(x), loaded.eval()(x)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_header_without_a_kind_is_a_resnet_and_an_unknown_kind_is_refused(tmp_path, monkeypatch):
    """Every model file made before the kinds (the shipped ones too) has no
    kind in its header: a resnet. A kind this version does not know is
    refused in one line naming the file."""
    from zeroloop.engine.nn.net import ResNet
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR

    shipped = SHIPPED_DIR / "connect4.pt"
    assert "kind" not in read_model_header(shipped)["net"]
    assert type(load_model(shipped)[0]) is ResNet
    game = make_game("tictactoe")
    path = tmp_path / "new.pt"
    save_model(path, small_net(game), game)
    assert "kind" not in read_model_header(path)["net"]
    assert type(load_model(path)[0]) is ResNet
    net = small_net(game)
    monkeypatch.setattr(NetConfig, "to_dict", lambda self: {"kind": "transformer", "blocks": 1, "channels": 8,
                                                           "value_hidden": 8})
    save_model(tmp_path / "future.pt", net, game)
    monkeypatch.undo()
    with pytest.raises(DamagedFileError, match=r"future.pt: a network of kind 'transformer', which this "
                                               r"version does not know \(it knows resnet, gpool, mlp\)"):
        load_model(tmp_path / "future.pt")
