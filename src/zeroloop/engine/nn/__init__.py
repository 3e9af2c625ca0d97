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
from zeroloop.engine.nn.net import NetConfig, PolicyValueNet

__all__ = [
    "PRECISIONS", "ConstantEvaluator", "FixedBatchEvaluator", "NetConfig", "NetworkEvaluator",
    "PolicyValueNet", "inference_net", "position_key", "resolve_device", "uniform_evaluator",
]
