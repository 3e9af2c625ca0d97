"""The inference net answers as the trained net does, and a position's answer
does not depend on the other positions of its batch (fixed-batch self-play
relies on it)."""

import numpy as np
import pytest
import torch
from torch import nn

from zeroloop.engine.games import make_game, random_line
from zeroloop.engine.nn import NetConfig, NetworkEvaluator, PolicyValueNet
from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
from zeroloop.pipeline.data.storage import load_model


def _net(name):
    game = make_game(name)
    if name == "connect4":
        return game, load_model(SHIPPED_DIR / "connect4.pt", game)[0]
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=2, channels=32, value_hidden=32))
    for m in net.modules():  # trained-looking BatchNorm statistics, so that folding has work to do
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return game, net.eval()


def _planes(game, n, seed):
    rng = np.random.default_rng(seed)
    return game.encode([random_line(game, int(rng.integers(0, game.max_moves)), rng)[0] for _ in range(n)])


@pytest.mark.parametrize("name", ["connect4", "tictactoe", "gomoku", "othello-6x6"])
def test_inference_net_answers_as_the_trained_net(name):
    _answers_as_the_trained_net(*_net(name))


def _answers_as_the_trained_net(game, net):
    """The inference net (BatchNorm folded) answers 64 positions as ``net`` itself, within 1e-5."""
    x = _planes(game, 64, 0)
    p0, v0 = NetworkEvaluator(game, net, "cpu", optimize=False).evaluate_planes(x)
    p1, v1 = NetworkEvaluator(game, net, "cpu").evaluate_planes(x)
    np.testing.assert_allclose(p1, p0, atol=1e-5)
    np.testing.assert_allclose(v1, v0, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("batch", [8, 32])
@pytest.mark.parametrize("name", ["connect4", "othello-6x6"])
def test_an_answer_does_not_depend_on_the_rest_of_the_batch(name, batch, precision):
    from zeroloop.engine.nn.inference import native_bf16

    game, net = _net(name)
    # bf16 where the CPU emulates it (oneDNN's reference kernels; ``auto`` never takes it there) is
    # 40 s of the suite on a Zen 3 at the full count: there, as many positions and rounds as the kinds' test
    positions, rounds = (48, 20) if precision == "bf16" and not native_bf16(torch.device("cpu")) else (96, 60)
    _answers_alone_and_in_any_batch_alike(NetworkEvaluator(game, net, "cpu", precision=precision),
                                          _planes(game, positions, 1), batch, rounds=rounds)


def _answers_alone_and_in_any_batch_alike(ev, x, batch: int, rounds: int) -> None:
    """Each position of ``x`` answered with zero rows around it, then in ``rounds`` random
    batches of ``batch`` of them: the same bits every time."""
    alone = []
    for j in range(len(x)):  # each position with zero rows around it
        b = np.zeros((batch,) + x.shape[1:], np.float32)
        b[0] = x[j]
        p, v = ev.evaluate_planes(b)
        alone.append((p[0].tobytes(), float(v[0])))
    rng = np.random.default_rng(2)
    for _ in range(rounds):
        idx = rng.choice(len(x), batch, replace=True)  # duplicates included, as padding makes them
        p, v = ev.evaluate_planes(x[idx])
        for r, j in enumerate(idx):
            assert (p[r].tobytes(), float(v[r])) == alone[j]


def test_bf16_answers_close_to_fp32_as_float32():
    game, net = _net("connect4")
    x = _planes(game, 64, 3)
    p32, v32 = NetworkEvaluator(game, net, "cpu").evaluate_planes(x)
    p16, v16 = NetworkEvaluator(game, net, "cpu", precision="bf16").evaluate_planes(x)
    assert p16.dtype == np.float32 and v16.dtype == np.float32
    assert not np.array_equal(p16, p32)  # it really ran in bf16
    np.testing.assert_allclose(p16, p32, atol=0.02)
    np.testing.assert_allclose(v16, v32, atol=0.08)


def test_fp16_and_unknown_precisions_are_refused_on_the_cpu():
    game, net = _net("tictactoe")
    with pytest.raises(ValueError, match="fp16.*needs a CUDA device"):
        NetworkEvaluator(game, net, "cpu", precision="fp16")
    with pytest.raises(ValueError, match="precision 'int4': expected one of auto, fp32, bf16, fp16, int8"):
        NetworkEvaluator(game, net, "cpu", precision="int4")


def test_int8_is_refused_on_a_gpu_and_in_params():
    from zeroloop.engine.nn.inference import precision_name
    from zeroloop.pipeline.params.schema import RuntimeParams

    with pytest.raises(ValueError, match="'int8' runs on the CPU"):
        precision_name("int8", torch.device("cuda"))
    with pytest.raises(ValueError, match="precision int8 runs on the CPU .*device cuda:1"):
        RuntimeParams(device="cuda:1", precision="int8")
    assert RuntimeParams(device="cpu", precision="int8").precision == "int8"


@pytest.mark.parametrize("name", ["connect4", "gomoku"])
def test_int8_answers_close_to_fp32_and_the_same_every_time(name, monkeypatch):
    """The trunk really runs in int8 (the answers move), not far (the best
    move stays on nine positions in ten), and a second evaluator of the same
    net, built afresh, answers bit for bit as the first."""
    from zeroloop.engine.nn import int8

    monkeypatch.setenv("ZEROLOOP_CACHE", "off")  # quantised here, not read from another process's file
    game, net = _net(name)
    x = _planes(game, 128, 5)
    p32, v32 = NetworkEvaluator(game, net, "cpu").evaluate_planes(x)
    ev = NetworkEvaluator(game, net, "cpu", precision="int8")
    p8, v8 = ev.evaluate_planes(x)
    assert p8.dtype == np.float32 and v8.dtype == np.float32
    assert not np.array_equal(p8, p32)
    np.testing.assert_allclose(p8, p32, atol=0.08)
    np.testing.assert_allclose(v8, v32, atol=0.2)
    assert np.mean(p8.argmax(1) == p32.argmax(1)) >= 0.9
    int8._QUANTISED.clear()  # quantised again from nothing
    again = NetworkEvaluator(game, net, "cpu", precision="int8").evaluate_planes(x)
    assert np.array_equal(again[0], p8) and np.array_equal(again[1], v8)


def test_a_quantised_net_is_kept_on_disk_for_other_processes_and_a_damaged_copy_is_made_again(
        tmp_path, monkeypatch):
    from zeroloop.engine.nn import int8

    monkeypatch.setenv("ZEROLOOP_CACHE", str(tmp_path))
    monkeypatch.setattr(int8, "CACHE_FILES", 2)
    game, net = _net("connect4")
    x = _planes(game, 32, 3)
    int8._QUANTISED.clear()
    made = NetworkEvaluator(game, net, "cpu", precision="int8").evaluate_planes(x)
    kept = list((tmp_path / "int8").glob("*.onnx"))
    assert len(kept) == 1

    def fresh():  # as another process: nothing in memory, and quantising would fail if it ran
        int8._QUANTISED.clear()
        with monkeypatch.context() as m:
            m.setattr(int8, "quantize", lambda *a, **k: pytest.fail("quantised again"))
            return NetworkEvaluator(game, net, "cpu", precision="int8").evaluate_planes(x)

    read = fresh()
    assert np.array_equal(read[0], made[0]) and np.array_equal(read[1], made[1])
    # a damaged file fails its checksum: quantised again, the same answers, the file replaced
    data = bytearray(kept[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    kept[0].write_bytes(bytes(data))
    with pytest.raises(pytest.fail.Exception, match="quantised again"):
        fresh()
    int8._QUANTISED.clear()
    again = NetworkEvaluator(game, net, "cpu", precision="int8").evaluate_planes(x)
    assert np.array_equal(again[0], made[0]) and np.array_equal(again[1], made[1])
    assert np.array_equal(fresh()[0], made[0])
    # the least recently used go beyond CACHE_FILES
    for seed in (1, 2):
        torch.manual_seed(seed)
        other = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
        NetworkEvaluator(game, other, "cpu", precision="int8")
    assert len(list((tmp_path / "int8").glob("*.onnx"))) == 2
    assert not kept[0].exists()
    # a run capped to AVX2 (ONEDNN_MAX_CPU_ISA) calibrates on other kernels: it keeps its own file
    native = int8._cache_path("k")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert int8._cache_path("k") != native


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_answers_as_the_cpu_through_pinned_buffers(precision):
    game, net = _net("connect4")
    ref_p, ref_v = NetworkEvaluator(game, net, "cpu").evaluate_planes(_planes(game, 64, 4))
    ev = NetworkEvaluator(game, net, "cuda", precision=precision)
    for n in (64, 8, 64):  # the pinned buffer is reused, and sliced for a smaller batch
        p, v = ev.evaluate_planes(_planes(game, 64, 4)[:n])
        tol = 1e-4 if precision == "fp32" else 0.05
        np.testing.assert_allclose(p, ref_p[:n], atol=tol)
        np.testing.assert_allclose(v, ref_v[:n], atol=2 * tol)
    assert ev._pinned is not None and ev._pinned.is_pinned()


def test_auto_precision_is_int8_on_x86_then_bf16_where_native_else_fp32():
    from zeroloop.engine.nn.inference import fast_int8, native_bf16, precision_name

    cpu = torch.device("cpu")
    x86 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    assert fast_int8(cpu) == x86  # onnxruntime is a dependency
    expected = "int8" if x86 else "bf16" if native_bf16(cpu) else "fp32"
    assert precision_name("auto", cpu) == expected
    game, net = _net("tictactoe")
    assert NetworkEvaluator(game, net, "cpu", precision="auto").precision == expected


def test_a_onednn_cap_below_bf16_makes_bf16_not_native(monkeypatch):
    from zeroloop.engine.nn.inference import native_bf16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not native_bf16(torch.device("cpu"))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert native_bf16(torch.device("cpu"))


@pytest.mark.parametrize("trained", [True, False])
def test_int8_quantises_every_trunk_convolution(trained):
    """Every convolution of the stem and the trunk reads int8 inputs, weights
    and int32 biases (each through a DequantizeLinear node); the heads'
    weights stay float32. Also for an untrained net, whose all-zero folded biases the exporter
    shares between convolutions."""
    import onnx

    from zeroloop.engine.nn import inference_net
    from zeroloop.engine.nn.int8 import calibration_planes, export_onnx, quantize

    game, net = _net("connect4")
    if not trained:
        net = PolicyValueNet.for_game(game, NetConfig(blocks=2, channels=16, value_hidden=16)).eval()
    folded = inference_net(net)
    planes = calibration_planes(game, folded, 64)
    graph = onnx.load_from_string(quantize(export_onnx(folded, planes), planes)).graph
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    convs = [n for n in graph.node if n.op_type == "Conv"]
    trunk = [n for n in convs if n.name.startswith(("/stem", "/trunk"))]
    assert len(trunk) == 1 + 2 * net.config.blocks
    for conv in trunk:
        assert [made_by.get(x) for x in conv.input] == ["DequantizeLinear"] * 3, conv.name
    for conv in convs:
        if conv not in trunk:
            assert made_by.get(conv.input[1]) is None, conv.name  # an initializer: float weights


def test_auto_precision_is_fp32_on_a_gpu_even_where_bf16_is_native(monkeypatch):
    """On an H100 self-play ran fp32 1.26x bf16 at the pipeline's batch (docs/speed.md), so
    ``auto`` does not take bf16 on CUDA whatever the GPU supports."""
    from zeroloop.engine.nn.inference import precision_name

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert precision_name("auto", torch.device("cuda")) == "fp32"
    assert precision_name("auto", torch.device("cuda:1")) == "fp32"
    assert precision_name("bf16", torch.device("cuda")) == "bf16"  # still there when asked for


# The other kinds of net (net.kind): the same promises as the resnet's.

KINDS = {"gpool": NetConfig(kind="gpool", blocks=2, channels=16, value_hidden=16),
         "gpool-heads": NetConfig(kind="gpool", blocks=2, channels=16, policy_channels=4, value_channels=8,
                                  value_hidden=16),
         "mlp": NetConfig(kind="mlp", hidden=64, layers=3, value_hidden=16)}


def _kind_net(kind, name, seed=0):
    game = make_game(name)
    torch.manual_seed(seed)
    net = PolicyValueNet.for_game(game, KINDS[kind])
    for m in net.modules():  # trained-looking BatchNorm statistics, so that folding has work to do
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return game, net.eval()


@pytest.mark.parametrize("name", ["connect4", "othello-6x6", "go-5"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_folds_its_batchnorm_and_answers_as_the_trained_net(kind, name):
    from zeroloop.engine.nn import inference_net

    game, net = _kind_net(kind, name)
    folded = inference_net(net)
    assert not any(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) for m in folded.modules())
    _answers_as_the_trained_net(game, net)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kinds_answer_does_not_depend_on_the_rest_of_the_batch(kind, precision):
    game, net = _kind_net(kind, "connect4")
    _answers_alone_and_in_any_batch_alike(NetworkEvaluator(game, net, "cpu", precision=precision),
                                          _planes(game, 48, 1), 16, rounds=20)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_int8_of_each_kind_answers_close_to_fp32_with_its_hidden_layers_quantised(kind, monkeypatch):
    """Every convolution and linear map of the stem and the trunk (the MLP's
    hidden layers, the gpool block's pooling map) reads int8 inputs, weights
    and int32 biases; the heads' weights stay float32; the answers move, not
    far."""
    import onnx

    from zeroloop.engine.nn import inference_net
    from zeroloop.engine.nn.int8 import calibration_planes, export_onnx, quantize

    monkeypatch.setenv("ZEROLOOP_CACHE", "off")
    game, net = _kind_net(kind, "connect4")
    folded = inference_net(net)
    planes = calibration_planes(game, folded, 64)
    graph = onnx.load_from_string(quantize(export_onnx(folded, planes), planes)).graph
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    layers = [n for n in graph.node if n.op_type in ("Conv", "Gemm")]
    trunk = [n for n in layers if n.name.startswith(("/stem", "/trunk"))]
    # mlp: its 3 layers; gpool: the stem, 2 blocks of 2 and the pooling block's convolution and map
    expected = {"mlp": 3, "gpool": 1 + 2 * 2 + 2, "gpool-heads": 1 + 2 * 2 + 2}[kind]
    assert len(trunk) == expected, [n.name for n in trunk]
    for layer in trunk:
        assert [made_by.get(x) for x in layer.input] == ["DequantizeLinear"] * 3, layer.name
    for layer in layers:
        if layer not in trunk:
            assert made_by.get(layer.input[1]) is None, layer.name
    x = _planes(game, 128, 5)
    p32, v32 = NetworkEvaluator(game, net, "cpu").evaluate_planes(x)
    p8, v8 = NetworkEvaluator(game, net, "cpu", precision="int8").evaluate_planes(x)
    assert not np.array_equal(p8, p32)
    np.testing.assert_allclose(p8, p32, atol=0.08)
    np.testing.assert_allclose(v8, v32, atol=0.2)
    assert np.mean(p8.argmax(1) == p32.argmax(1)) >= 0.9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_answers_on_cuda_as_on_the_cpu(kind, precision):
    game, net = _kind_net(kind, "connect4")
    x = _planes(game, 64, 4)
    ref_p, ref_v = NetworkEvaluator(game, net, "cpu").evaluate_planes(x)
    p, v = NetworkEvaluator(game, net, "cuda", precision=precision).evaluate_planes(x)
    tol = 1e-4 if precision == "fp32" else 0.05
    np.testing.assert_allclose(p, ref_p, atol=tol)
    np.testing.assert_allclose(v, ref_v, atol=2 * tol)


@pytest.mark.parametrize("name", ["connect4", "tictactoe", "othello-6x6", "go-5"])
def test_encode_padded_is_the_encoding_of_the_padded_states(name):
    from zeroloop.engine.nn.inference import encode_padded

    game = make_game(name)
    rng = np.random.default_rng(3)
    states = [random_line(game, int(rng.integers(0, game.max_moves)), rng)[0] for _ in range(5)]
    for pad_to in (0, 5, 8):
        expected = game.encode(states + [states[-1]] * max(0, pad_to - len(states)))
        got = encode_padded(game, states, pad_to)
        assert got.dtype == expected.dtype and got.flags.c_contiguous
        assert np.array_equal(got, expected)


@pytest.mark.parametrize("inner_kind", ["net", "const"])
def test_fixed_batches_answer_the_same_bits_whether_the_inner_evaluator_pads_or_not(inner_kind):
    """FixedBatchEvaluator hands an evaluator that ``pads`` its states and the
    padding size, and any other the padded states: the same answers, bit for
    bit, the same counters, repeated positions and cache hits included."""
    from zeroloop.engine.nn import ConstantEvaluator, FixedBatchEvaluator

    game, net = _net("connect4")
    inner = NetworkEvaluator(game, net, "cpu") if inner_kind == "net" else ConstantEvaluator(game)
    assert inner.pads
    padded, plain = (FixedBatchEvaluator(ev, batch=8, cache=30) for ev in (inner, lambda s: inner(s)))
    rng = np.random.default_rng(4)
    pool = [random_line(game, int(rng.integers(0, 20)), rng)[0] for _ in range(40)]
    for n in (1, 7, 8, 9, 23, 0, 40):
        states = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
        (p1, v1), (p2, v2) = padded(states), plain(states)
        assert p1.dtype == p2.dtype == np.float32 and v1.dtype == v2.dtype == np.float32
        assert p1.shape == p2.shape and np.array_equal(p1, p2) and np.array_equal(v1, v2)
    assert (padded.requested, padded.hits, padded.computed) == (plain.requested, plain.hits, plain.computed)


@pytest.mark.parametrize("rows", [True, False])
def test_the_cache_answers_what_the_network_would_and_keeps_the_most_recently_used(rows):
    """Behind the cache every answer is the bits a cache-less evaluator gives at the same batch
    size, and the cache holds exactly the ``cache`` positions used last (a position asked for again
    is fresh again; of more new positions than it holds in one call, the last ones): its hits are
    those of a plain LRU model of it, call after call, evictions included. Both caches: the arrays
    of positions as rows (Connect Four behind a network) and the dictionary of states (any other
    evaluator)."""
    from collections import OrderedDict

    from zeroloop.engine.nn import FixedBatchEvaluator
    from zeroloop.engine.nn.inference import position_key

    game, net = _net("connect4")
    network = NetworkEvaluator(game, net, "cpu")
    inner = network if rows else (lambda states: network(states))
    # the cache-less reference answers states through the network's own call (encode, then the net)
    cached = FixedBatchEvaluator(inner, batch=8, cache=12)
    fresh = FixedBatchEvaluator(network.__call__, batch=8)
    assert cached.rows == rows and not fresh.rows
    rng = np.random.default_rng(11)
    pool = [random_line(game, int(rng.integers(0, 20)), rng)[0] for _ in range(30)]
    model: OrderedDict = OrderedDict()
    hits = 0
    for n in (5, 9, 16, 1, 20, 3, 30, 8, 13, 2, 25):  # 30 and 25 new positions: more than it holds
        states = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
        (p1, v1), (p2, v2) = cached(states), fresh(states)
        assert np.array_equal(p1, p2) and np.array_equal(v1, v2)
        new = []
        for key in map(position_key, states):
            if key in model:
                model.move_to_end(key)
                hits += 1
            elif key not in new:
                new.append(key)
        model.update(dict.fromkeys(new))
        while len(model) > 12:
            model.popitem(last=False)
        assert cached.hits == hits and cached.cached_keys() == list(model)
    assert hits > 0 and fresh.hits == 0


@pytest.mark.parametrize("capacity", [0, 1, 2, 3, 7, 50])
def test_the_row_cache_is_a_least_recently_used_cache(capacity):
    """:class:`RowCache` against an OrderedDict model, many requests of random keys from a small
    pool (collisions, deletions wrapping around the table, repeated keys in a request): the same hits
    with the answers remembered for them, one row per new key, the same keys kept in the same order."""
    from collections import OrderedDict

    from zeroloop.engine.nn.row_cache import RowCache

    rng = np.random.default_rng(capacity)
    pool = np.stack([rng.integers(0, 1 << 40, 24), rng.integers(0, 1 << 40, 24), rng.integers(0, 16, 24)], 1)
    pool[:6, 0] = pool[6:12, 0]  # keys that share words
    cache, model = RowCache(capacity, 3), OrderedDict()
    for _ in range(300):
        query = pool[rng.integers(0, len(pool), int(rng.integers(1, 12)))]
        out_p, out_v = np.full((len(query), 3), -1, np.float32), np.full(len(query), -1, np.float32)
        hits, m, compute_of, firsts = cache.lookup(query, out_p, out_v)
        keys = [tuple(int(k) for k in q) for q in query]
        new = list(dict.fromkeys(k for k in keys if k not in model))
        expect_hits = [k in model for k in keys]
        for k in keys:
            if k in model:
                model.move_to_end(k)
        assert hits == sum(expect_hits) and m == len(new)
        for i, k in enumerate(keys):
            if expect_hits[i]:
                assert compute_of[i] == -1 and out_v[i] == model[k] and (out_p[i] == model[k]).all()
            else:
                assert keys[firsts[compute_of[i]]] == k
        answers = rng.random(m).astype(np.float32)
        cache.remember(query, firsts, m, np.repeat(answers[:, None], 3, 1), answers)
        for k, v in list(zip(new, answers))[max(0, m - capacity):]:
            model[k] = v
        while len(model) > capacity:
            model.popitem(last=False)
        assert cache.keys_by_use() == list(model)


def test_a_batch_of_positions_is_keyed_as_each_position_alone():
    """The cache keys a batch in one pass: Connect Four's plain states, Go's (whose earlier boards
    are part of the key) and a list mixing the two get the keys :func:`position_key` gives each."""
    from zeroloop.engine.nn.inference import keys_of, position_key

    rng = np.random.default_rng(2)
    c4, go = make_game("connect4"), make_game("go-7")
    plain = [random_line(c4, int(rng.integers(0, 15)), rng)[0] for _ in range(20)]
    boards = [random_line(go, int(rng.integers(0, 15)), rng)[0] for _ in range(20)]
    for states in (plain, boards, plain[:5] + boards[:5], boards[:3] + plain, []):
        assert keys_of(states) == [position_key(s) for s in states]
    assert len(keys_of(boards)[0]) == 5 and len(keys_of(plain)[0]) == 4
