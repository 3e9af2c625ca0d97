"""The policy-value network and its inference."""

from zeroloop.engine.nn.inference import (
    PRECISIONS,
    ConstantEvaluator,
    FixedBatchEvaluator,
    NetworkEvaluator,
    inference_net,
    position_key,
    resolve_device,
    uniform_evaluator,
)
from zeroloop.engine.nn.net import NET_KINDS, NetConfig, PolicyValueNet, flops_per_position

__all__ = [
    "NET_KINDS", "PRECISIONS", "ConstantEvaluator", "FixedBatchEvaluator", "NetConfig", "NetworkEvaluator",
    "PolicyValueNet", "flops_per_position", "inference_net", "position_key", "resolve_device",
    "uniform_evaluator",
]
