"""Network inference for search: an :data:`~zeroloop.engine.search.Evaluator` over a
:class:`PolicyValueNet`, a fixed-batch evaluator with a position cache, and
device selection."""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from zeroloop.engine.games.base import Game, Rows, State
from zeroloop.engine.nn.net import PolicyValueNet, ResNet
from zeroloop.engine.nn.row_cache import RowCache, row_keys, scatter
from zeroloop.engine.timing import PartTimer


def encode_padded(game: Game, states: Sequence[State], pad_to: int = 0) -> np.ndarray:
    """``game.encode(states)``, then copies of the last row up to ``pad_to`` rows:
    the planes of ``states`` padded with copies of its last state, without
    encoding the copies (``encode`` is row by row: the Game protocol)."""
    planes = game.encode(states)
    extra = pad_to - len(planes)
    if extra <= 0:
        return planes
    return np.concatenate([planes, np.broadcast_to(planes[-1:], (extra, *planes.shape[1:]))])


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cpu``/``cuda[:n]`` as given."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r}: expected auto, cpu or cuda[:N]") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device")
    return dev


class _FirstChannel(nn.Module):
    """A 1x1 convolution computed with one more, all-zero output channel,
    keeping the first: see :func:`inference_net`."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        wide = nn.Conv2d(conv.in_channels, 2, 1, bias=True)
        with torch.no_grad():
            wide.weight.zero_()
            wide.bias.zero_()
            wide.weight[0] = conv.weight[0]
            wide.bias[0] = conv.bias[0] if conv.bias is not None else 0.0
        self.conv = wide

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)[:, :1]


def inference_net(net: PolicyValueNet) -> PolicyValueNet:
    """A copy of ``net`` for inference: every BatchNorm folded into the
    convolution or linear map before it (:meth:`PolicyValueNet.fold_batchnorm`;
    about 1.1x faster on this CPU for the resnet, answers within 1e-6), and a
    convolutional net's value head's 1x1 convolution, when it has one channel
    (AlphaZero's head), computed as a two-channel one. On CPU (oneDNN) a
    one-channel 1x1 convolution's result for a position can depend on the
    other positions of its batch; with this form it was bitwise independent
    of them in every test (tests/test_inference.py), which fixed-batch
    self-play relies on."""
    folded = copy.deepcopy(net).eval()
    folded.fold_batchnorm()
    if isinstance(folded, ResNet) and folded.value_conv[0].out_channels == 1:
        folded.value_conv[0] = _FirstChannel(folded.value_conv[0])
    return folded


#: network number formats for inference; fp16 only where it has fast kernels (CUDA), int8 on the CPU
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively: a CUDA GPU that supports it,
    or a CPU with avx512_bf16 or AMX (elsewhere bf16 is emulated, and slow)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    cpu = torch.cpu
    if device.type != "cpu" or not (cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported()):
        return False
    # oneDNN capped below its bf16 ISA (ONEDNN_MAX_CPU_ISA, to run as an older CPU would) emulates bf16
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    return not cap or any(word in cap for word in ("BF16", "FP16", "AMX", "AVX10", "ALL", "DEFAULT"))


def fast_int8(device: torch.device) -> bool:
    """Whether ``precision: auto`` runs int8 on ``device``: a CPU whose vector
    code PyTorch runs at AVX2 or better (so x86-64; an ``ATEN_CPU_CAPABILITY``
    cap counts), with ONNX Runtime installed. Measured there: the fastest
    option, with the move error of fp32 (docs/lab/speed-log.md)."""
    if device.type != "cpu" or torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return False
    from zeroloop.engine.nn.int8 import available

    return available()


def precision_name(precision: str, device: torch.device) -> str:
    """``auto`` resolved for ``device``: int8 on x86-64 CPUs (:func:`fast_int8`),
    else bf16 on a CPU that computes it natively (:func:`native_bf16`), else
    fp32, on a GPU too: the net is small, so a CUDA call is bound by its
    launches and bf16's casts cost more than its arithmetic saves (on an H100,
    self-play ran fp32 1.26x bf16 at the pipeline's batch of 32 and 1.07x at
    512, measured in one run: docs/speed.md), and IEEE fp32 answers as the
    CPU does. Other names
    checked and returned. ``fp16`` is refused on the CPU, where it has no fast
    kernels (23x slower than fp32 on a Zen 4 EPYC at batch 32; bf16 was 1.8x
    faster), ``int8`` on a GPU."""
    if precision == "auto":
        cpu_bf16 = device.type == "cpu" and native_bf16(device)
        return "int8" if fast_int8(device) else "bf16" if cpu_bf16 else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision == "int8" and device.type != "cpu":
        raise ValueError(f"precision 'int8' runs on the CPU (ONNX Runtime), not on {device.type}; "
                         "use 'bf16' or 'fp16' on a GPU")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision 'fp16' needs a CUDA device (it is ~20x slower than fp32 on the CPU); "
                         "use 'bf16' or 'fp32' there")
    return precision


def ieee_fp32_on_cuda() -> None:
    """CUDA float32 convolutions and matrix products in IEEE fp32, not TF32,
    in this process (PyTorch's flags are per process; a self-play or arena
    worker holds one evaluator)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


class NetworkEvaluator:
    """Batched evaluation of positions: softmax priors ``[B, A]`` and values ``[B]``.

    Runs :func:`inference_net` of the given net (the net itself is left as it
    is, for training), in eval mode under ``torch.inference_mode``, in
    ``precision`` (``fp32``, ``bf16``, ``fp16`` on CUDA, ``int8`` on the CPU,
    or ``auto``: :func:`precision_name`; the answers are returned as float32
    either way). On CUDA the planes go through a pinned
    host buffer, copied without blocking, and ``fp32`` means IEEE fp32:
    PyTorch runs CUDA convolutions in TF32 by default (10-bit mantissa; on an
    H100 the shipped net's priors moved by up to 4e-4 from the CPU's), so an
    fp32 evaluator turns TF32 off in its process (see :func:`ieee_fp32_on_cuda`).

    ``timer``, when given, is charged each call's encoding and network parts
    (:mod:`zeroloop.engine.timing`).
    """

    def __init__(self, game: Game, net: PolicyValueNet, device: str | torch.device = "auto", *,
                 optimize: bool = True, precision: str = "fp32", timer: PartTimer | None = None) -> None:
        self.game, self.timer = game, timer
        self.device = resolve_device(device) if isinstance(device, str) else device
        self.precision = precision_name(precision, self.device)
        self.dtype = _DTYPES.get(self.precision, torch.float32)
        if self.device.type == "cuda" and self.precision == "fp32":
            ieee_fp32_on_cuda()
        # optimize=False runs the net as it is (benchmarks compare the two)
        self.net = (inference_net(net) if optimize else net).to(self.device, self.dtype).eval()
        self._pinned: torch.Tensor | None = None
        self._int8 = None
        if self.precision == "int8":
            from zeroloop.engine.nn.int8 import int8_runner

            self._int8 = int8_runner(game, self.net if optimize else inference_net(net))

    #: takes ``pad_to`` (:func:`encode_padded`), which :class:`FixedBatchEvaluator` uses
    pads = True

    def __call__(self, states: Sequence[State], *, pad_to: int = 0) -> tuple[np.ndarray, np.ndarray]:
        timer = self.timer
        planes = encode_padded(self.game, states, pad_to)
        if timer is not None:
            timer.lap("encoding")
        answer = self.evaluate_planes(planes)
        if timer is not None:
            timer.lap("network")
        return answer

    def _to_device(self, planes: np.ndarray) -> torch.Tensor:
        host = torch.from_numpy(planes)
        if self.device.type != "cuda":
            return host.to(self.dtype)
        pinned = self._pinned
        if pinned is None or pinned.shape[0] < len(planes) or pinned.shape[1:] != host.shape[1:]:
            self._pinned = torch.empty(host.shape, dtype=host.dtype).pin_memory()
        buf = self._pinned[:len(planes)]
        buf.copy_(host)
        # the copy is queued on the current stream; the forward pass after it on the same stream
        # waits for it, and reading the answers back (.cpu()) waits for both before buf is reused
        return buf.to(self.device, non_blocking=True).to(self.dtype)

    def evaluate_planes(self, planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            if self._int8 is not None:
                logits, value = (torch.from_numpy(a) for a in self._int8(planes))
            else:
                logits, value = self.net(self._to_device(planes))
            priors = torch.softmax(logits.float(), dim=1)
            return priors.cpu().numpy(), value.float().cpu().numpy()


def uniform_evaluator(game: Game):
    """An oracle with uniform priors and value 0 (pure search, for tests and baselines)."""

    def evaluate(states: Sequence[State]) -> tuple[np.ndarray, np.ndarray]:
        return (np.ones((len(states), game.num_actions), np.float32),
                np.zeros(len(states), np.float32))

    return evaluate


class ConstantEvaluator:
    """The network that costs nothing, to measure what the rest of self-play
    costs: every position gets the same answer, uniform priors over all moves
    (the search keeps the legal ones) and value 0, as :func:`uniform_evaluator`
    gives. Called as :class:`NetworkEvaluator` is (the batch is encoded first,
    as any network needs, and ``timer`` is charged the encoding and the
    "network": filling the answer), so that behind a
    :class:`FixedBatchEvaluator` self-play runs its own code path with only the
    network's arithmetic taken out."""

    def __init__(self, game: Game, *, timer: PartTimer | None = None) -> None:
        self.game, self.timer = game, timer

    #: takes ``pad_to`` (:func:`encode_padded`), which :class:`FixedBatchEvaluator` uses
    pads = True
    __call__ = NetworkEvaluator.__call__  # the batch encoded, then answered: as a network is

    def evaluate_planes(self, planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[B, P, H, W]`` planes -> priors ``[B, A]`` (each ``1 / A``), values ``[B]`` (0)."""
        n, actions = len(planes), self.game.num_actions
        return np.full((n, actions), 1.0 / actions, np.float32), np.zeros(n, np.float32)


def position_key(state: State) -> tuple:
    """What a game's ``encode`` reads of a state (the Game protocol's
    invariant): the stones, the last move and the side to move, and the
    state's ``planes_key`` where it has one (Go: the recent positions)."""
    extra = getattr(state, "planes_key", None)
    if extra is None:
        return state.me, state.opp, state.last, state.ply & 1
    return state.me, state.opp, state.last, state.ply & 1, extra


def keys_of(states: Sequence[State]) -> list[tuple]:
    """:func:`position_key` of each state, in one pass: states of one class
    without a ``planes_key`` (every game but Go) are keyed without looking
    for one on each."""
    cls = type(states[0]) if states else State
    if getattr(cls, "planes_key", None) is None and all(type(s) is cls for s in states):
        return [(s.me, s.opp, s.last, s.ply & 1) for s in states]
    return [position_key(s) for s in states]


class FixedBatchEvaluator:
    """An evaluator that hands its inner one exactly ``batch`` positions per
    call (the last call of a request padded with copies of a position) and
    remembers the answers for up to ``cache`` positions (0: no cache).

    Why: a network's floating-point answer for a position depends on the size
    of the batch it is computed in (the kernels are chosen per size), not on the
    other rows of the batch. At one fixed size every answer is a function of
    the position alone: a self-play game then does not depend on which games
    share its batches (worker count and games in flight change nothing), and a
    cached answer is the answer a new call would give. Repeated positions in one
    request are computed once.

    Counters: ``requested`` positions asked for, ``hits`` answered from the
    cache, ``computed`` rows sent to the inner evaluator (padding included).
    ``timer``, when given, is charged the cache and batching parts of each
    call, and the inner call as network (an inner evaluator given the same
    timer splits that further): :mod:`zeroloop.engine.timing`.
    """

    def __init__(self, inner: Callable[[Sequence[State]], tuple[np.ndarray, np.ndarray]], *, batch: int,
                 cache: int = 0, timer: PartTimer | None = None) -> None:
        if batch < 1 or cache < 0:
            raise ValueError(f"batch={batch} must be >= 1 and cache={cache} >= 0")
        self.inner, self.batch, self.capacity, self.timer = inner, batch, cache, timer
        # positions as rows of arrays (a game with ``encode_rows``: Connect Four) when the inner
        # evaluator answers planes: the cache, the encoding and the padding in numba (RowCache), the
        # inner's ``evaluate_planes`` called directly (its ``__call__`` is encode_padded, then that)
        game = getattr(inner, "game", None)
        self.rows = hasattr(game, "encode_rows") and hasattr(inner, "evaluate_planes")
        self._rows = RowCache(cache, game.num_actions) if self.rows else None
        # the cache: key -> its row of the answer arrays, least recently used first; the arrays
        # are made at the first answer (its number of actions)
        self._cache: OrderedDict[tuple, int] = OrderedDict()
        self._priors: np.ndarray | None = None  # [cache, A] float32
        self._values = np.zeros(cache, np.float32)
        self.requested = self.hits = self.computed = 0

    def __call__(self, states: Sequence[State]) -> tuple[np.ndarray, np.ndarray]:
        if self.rows and states:
            return self.evaluate_rows(Rows.of(states), np.arange(len(states)))
        timer = self.timer
        n = len(states)
        self.requested += n
        keys = keys_of(states)
        todo: dict[tuple, int] = {}  # key -> its row of this call's computed answers, in first-seen order
        firsts: list[int] = []  # the first row of the request that asks for each of those
        hit_rows: list[int] = []  # rows of the request answered from the cache ...
        hit_slots: list[int] = []  # ... and their rows of the cache's arrays
        new_rows: list[int] = []  # rows of the request computed now ...
        new_from: list[int] = []  # ... and their rows of this call's answers
        cache = self._cache
        get, to_end = cache.get, cache.move_to_end
        for i, key in enumerate(keys):
            slot = get(key)
            if slot is not None:
                to_end(key)
                hit_rows.append(i)
                hit_slots.append(slot)
                continue
            j = todo.get(key)
            if j is None:
                j = todo[key] = len(firsts)
                firsts.append(i)
            new_rows.append(i)
            new_from.append(j)
        self.hits += len(hit_rows)
        if timer is not None:
            timer.lap("cache")
        if not n:
            return np.zeros((0, 0), np.float32), np.zeros(0, np.float32)
        # an inner evaluator that pads its own planes (``pads``) is not given the padding to encode
        pads = getattr(self.inner, "pads", False)
        m_all, size = len(firsts), self.batch
        new_p: np.ndarray | None = None
        new_v = np.empty(m_all, np.float32)
        for start in range(0, m_all, size):
            chunk = [states[i] for i in firsts[start:start + size]]
            m = len(chunk)
            if timer is not None:
                timer.lap("batching")
            if pads:
                priors, values = self.inner(chunk, pad_to=size)
            else:
                priors, values = self.inner(chunk + [chunk[-1]] * (size - m))
            if timer is not None:
                timer.lap("network")
            self.computed += size
            if new_p is None:
                new_p = np.empty((m_all, priors.shape[1]), np.float32)
            new_p[start:start + m] = priors[:m]
            new_v[start:start + m] = np.asarray(values).reshape(-1)[:m]
        actions = new_p.shape[1] if new_p is not None else self._priors.shape[1]
        out_p, out_v = np.empty((n, actions), np.float32), np.empty(n, np.float32)
        if hit_rows:  # read before this call's answers may take the rows of evicted positions
            out_p[hit_rows] = self._priors[hit_slots]
            out_v[hit_rows] = self._values[hit_slots]
        if new_rows:
            out_p[new_rows] = new_p[new_from]
            out_v[new_rows] = new_v[new_from]
        if timer is not None:
            timer.lap("batching")
        if self.capacity and m_all:
            self._remember(list(todo), new_p, new_v)
            if timer is not None:
                timer.lap("cache")
        return out_p, out_v

    def evaluate_rows(self, pos: Rows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The answers for the positions in rows ``rows`` of ``pos`` (when
        :attr:`rows`), as a call with their states answers, the same counters
        included: keyed, looked up, encoded and padded over arrays."""
        timer, cache, game = self.timer, self._rows, self.inner.game
        n, size = len(rows), self.batch
        self.requested += n
        actions = game.num_actions
        out_p, out_v = np.empty((n, actions), np.float32), np.empty(n, np.float32)
        query = np.empty((n, 3), np.int64)
        row_keys(*pos, rows, query)
        hits, m, compute_of, firsts = cache.lookup(query, out_p, out_v)
        self.hits += hits
        if timer is not None:
            timer.lap("cache")
        new_p, new_v = np.empty((m, actions), np.float32), np.empty(m, np.float32)
        for start in range(0, m, size):
            chunk = rows[firsts[start:min(start + size, m)]]
            planes = game.encode_rows(pos, chunk, size)
            if timer is not None:
                timer.lap("encoding")
            priors, values = self.inner.evaluate_planes(planes)
            if timer is not None:
                timer.lap("network")
            self.computed += size
            k = len(chunk)
            new_p[start:start + k] = priors[:k]
            new_v[start:start + k] = np.asarray(values).reshape(-1)[:k]
        scatter(compute_of, new_p, new_v, out_p, out_v)
        if timer is not None:
            timer.lap("batching")
        cache.remember(query, firsts, m, new_p, new_v)
        if timer is not None:
            timer.lap("cache")
        return out_p, out_v

    def cached_keys(self) -> list[tuple]:
        """The cached positions' keys (:func:`position_key`), least recently used first."""
        if self.rows:
            return [(me, opp, tail // 2 - 1, tail & 1) for me, opp, tail in self._rows.keys_by_use()]
        return list(self._cache)

    def _remember(self, keys: list[tuple], priors: np.ndarray, values: np.ndarray) -> None:
        """Cache the answers to ``keys`` (new positions, in order), each taking
        a free row or the least recently used position's."""
        cache, capacity = self._cache, self.capacity
        if self._priors is None:
            self._priors = np.zeros((capacity, priors.shape[1]), np.float32)
        keep = min(len(keys), capacity)  # of more new positions than the cache holds, the last ones
        keys, priors, values = keys[-keep:], priors[-keep:], values[-keep:]
        free = capacity - len(cache)
        slots = list(range(len(cache), len(cache) + min(free, keep)))
        if keep > free:  # the rows of the least recently used positions, oldest first
            pop = cache.popitem
            slots += [pop(last=False)[1] for _ in range(keep - free)]
        cache.update(zip(keys, slots))
        self._priors[slots] = priors
        self._values[slots] = values
