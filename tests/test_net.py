"""The network families (``net.kind``): each builds for every game with the
shapes the search and the trainer expect, the resnet keeps the module structure
its model files were made with, and a key of another kind's shape is refused."""

import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NET_KINDS, NetConfig, PolicyValueNet, flops_per_position
from zeroloop.engine.nn.net import GlobalPoolingBlock, GlobalPoolResNet, MLPNet, ResNet

GAMES = ["tictactoe", "connect4", "gomoku", "gomoku-8x8-5", "othello", "othello-6x6", "go-5", "go-9"]

#: a tiny net of each kind
TINY = {"resnet": NetConfig(blocks=1, channels=8, value_hidden=8),
        "gpool": NetConfig(kind="gpool", blocks=2, channels=8, value_hidden=8),
        "mlp": NetConfig(kind="mlp", hidden=32, layers=2, value_hidden=8)}


def test_every_kind_has_a_tiny_net_here():
    assert sorted(TINY) == sorted(NET_KINDS)


@pytest.mark.parametrize("name", GAMES)
@pytest.mark.parametrize("kind", NET_KINDS)
def test_each_kind_builds_for_every_game_with_the_shapes_of_the_search_and_the_trainer(kind, name):
    game = make_game(name)
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, NetConfig(**TINY[kind].__dict__))
    assert type(net) is {"resnet": ResNet, "gpool": GlobalPoolResNet, "mlp": MLPNet}[kind]
    rng = np.random.default_rng(0)
    states = [game.initial_state()]
    for _ in range(2):
        legal = np.flatnonzero(game.legal_mask(states[-1]))
        states.append(game.apply(states[-1], int(rng.choice(legal))))
    x = torch.from_numpy(game.encode(states))
    net.train()
    logits, value = net(x)
    assert logits.shape == (3, game.num_actions) and value.shape == (3,)
    net.eval()
    with torch.no_grad():
        logits, value = net(x)
    assert logits.shape == (3, game.num_actions) and value.shape == (3,)
    assert torch.all(value.abs() < 1)


def test_the_resnet_keeps_its_parameter_names_and_its_header():
    """What a resnet model file holds is what it held before the kinds: a
    header without a kind, the same parameter names in the same order."""
    assert NetConfig().to_dict() == {"blocks": 5, "channels": 64, "value_hidden": 64}
    net = PolicyValueNet.for_game(make_game("connect4"), NetConfig(blocks=1))

    def bn(prefix):
        return [f"{prefix}.{k}" for k in ("weight", "bias", "running_mean", "running_var",
                                          "num_batches_tracked")]

    assert list(net.state_dict()) == [
        "stem.0.weight", *bn("stem.1"),
        "trunk.0.conv1.weight", *bn("trunk.0.bn1"), "trunk.0.conv2.weight", *bn("trunk.0.bn2"),
        "policy_conv.0.weight", *bn("policy_conv.1"), "policy_fc.weight", "policy_fc.bias",
        "value_conv.0.weight", *bn("value_conv.1"),
        "value_fc.0.weight", "value_fc.0.bias", "value_fc.2.weight", "value_fc.2.bias"]


def test_the_headers_name_the_kind_and_only_its_shape_keys():
    assert NetConfig(kind="gpool", blocks=3, channels=32).to_dict() == {
        "kind": "gpool", "blocks": 3, "channels": 32, "value_hidden": 64}
    assert NetConfig(kind="mlp", hidden=256).to_dict() == {
        "kind": "mlp", "hidden": 256, "layers": 3, "value_hidden": 64}
    assert [NetConfig(**TINY[k].__dict__).shape for k in NET_KINDS] == ["1x8", "gpool 2x8", "mlp 2x32"]


def test_the_heads_widths_shape_both_tower_kinds_and_reach_the_header_only_when_not_alphazeros():
    """``policy_channels`` and ``value_channels`` widen the heads' 1x1
    convolutions and the linear maps that read them; a header names them
    only when they are not AlphaZero's 2 and 1 (so every older file reads
    as AlphaZero's heads), and the MLP, which has no such convolutions,
    refuses them."""
    game = make_game("connect4")
    for kind in ("resnet", "gpool"):
        config = NetConfig(kind=kind, blocks=1, channels=16, policy_channels=4, value_channels=32)
        net = PolicyValueNet.for_game(game, config)
        assert net.policy_conv[0].out_channels == 4 and net.policy_fc.in_features == 4 * 42
        assert net.value_conv[0].out_channels == 32 and net.value_fc[0].in_features == 32 * 42
        assert {k: config.to_dict().get(k) for k in ("policy_channels", "value_channels")} == {
            "policy_channels": 4, "value_channels": 32}
        logits, value = net.eval()(torch.from_numpy(game.encode([game.initial_state()])))
        assert logits.shape == (1, 7) and value.shape == (1,)
    assert "value_channels" not in NetConfig(kind="gpool", policy_channels=3).to_dict()
    assert "policy_channels" not in NetConfig(kind="gpool", value_channels=8).to_dict()
    with pytest.raises(ValueError, match="net.value_channels=32 does not apply to net.kind 'mlp', "
                                         "shaped by net.hidden and net.layers"):
        NetConfig(kind="mlp", value_channels=32)


def test_gpool_puts_global_pooling_in_every_second_block_and_in_a_lone_one():
    game = make_game("connect4")
    pooled = [[isinstance(b, GlobalPoolingBlock) for b in PolicyValueNet.for_game(
        game, NetConfig(kind="gpool", blocks=n, channels=16)).trunk] for n in (1, 2, 3, 5)]
    assert pooled == [[True], [False, True], [False, True, False], [False, True, False, True, False]]
    block = PolicyValueNet.for_game(game, NetConfig(kind="gpool", blocks=2, channels=32)).trunk[1]
    assert block.pool_conv.out_channels == 8 and block.pool_fc.in_features == 16  # mean and max of 32 / 4


def test_the_global_pooling_bias_lets_one_cell_reach_every_other():
    """A stone in one corner changes the gpool block's output at the far
    corner, which two 3x3 convolutions alone cannot reach on a 6x7 board."""
    torch.manual_seed(0)
    block = GlobalPoolingBlock(8, 2).eval()
    x = torch.zeros(1, 8, 6, 7)
    y = x.clone()
    y[0, :, 0, 0] = 1.0
    with torch.no_grad():
        far = block(y)[0, :, 5, 6] - block(x)[0, :, 5, 6]
        plain = torch.nn.Sequential(block.conv1, block.conv2)(y - x)[0, :, 5, 6]
    assert far.abs().max() > 1e-4 and plain.abs().max() == 0


def test_the_mlp_reads_the_flattened_planes_of_any_board():
    for name in ("connect4", "go-9"):
        game = make_game(name)
        net = PolicyValueNet.for_game(game, NetConfig(kind="mlp", hidden=16, layers=3))
        planes = game.encode([game.initial_state()]).shape[1]
        assert net.stem[1].in_features == planes * game.rows * game.cols
        assert len(net.trunk) == 2 and net.policy_fc.out_features == game.num_actions
        assert not net.convolutional


def test_parameter_counts_and_flops_per_position_on_connect_four():
    """The kinds' shapes of issue 51 on Connect Four: the default 5x64 resnet
    costs ~31 MFLOP a position, a 3x32 gpool net ~5, the default MLP ~1.3
    with 0.3-1M weights."""
    game = make_game("connect4")
    counts = {}
    for config in (NetConfig(), NetConfig(kind="gpool", blocks=3, channels=32), NetConfig(kind="mlp")):
        net = PolicyValueNet.for_game(game, config)
        counts[config.shape] = (sum(p.numel() for p in net.parameters()), flops_per_position(net))
    assert counts == {"5x64": (375_962, 31_182_104), "gpool 3x32": (63_274, 4_950_936),
                      "mlp 3x512": (649_864, 1_293_440)}
    # by hand, multiply-adds: convolutions over 42 cells (stem, 10 in the blocks, the heads' 1x1), linear maps
    resnet = 42 * 9 * (4 * 64 + 10 * 64 * 64) + 42 * 64 * 3 + 84 * 7 + 42 * 64 + 64
    mlp = 168 * 512 + 2 * 512 * 512 + 512 * 7 + 512 * 64 + 64
    assert (counts["5x64"][1], counts["mlp 3x512"][1]) == (2 * resnet, 2 * mlp)


@pytest.mark.parametrize("kind, changes, message", [
    ("mlp", {"blocks": 3},
     "net.blocks=3 does not apply to net.kind 'mlp', shaped by net.hidden and net.layers; leave it out"),
    ("mlp", {"blocks": 3, "channels": 32}, "net.blocks=3, net.channels=32 do not apply to net.kind 'mlp'"),
    ("gpool", {"hidden": 64}, "net.hidden=64 does not apply to net.kind 'gpool', shaped by net.blocks, "
                              "net.channels, net.policy_channels and net.value_channels; leave it out"),
    ("resnet", {"layers": 2}, "net.layers=2 does not apply to net.kind 'resnet'"),
])
def test_a_key_of_another_kinds_shape_is_refused(kind, changes, message):
    with pytest.raises(ValueError, match=message):
        NetConfig(kind=kind, **changes)
    with pytest.raises(ValueError, match="net.kind='cnn': must be one of 'resnet', 'gpool', 'mlp'"):
        NetConfig(kind="cnn")


def test_the_interface_itself_is_not_a_net():
    with pytest.raises(TypeError, match=r"PolicyValueNet.for_game\(game, config\)"):
        PolicyValueNet(6, 7, 7, NetConfig())
