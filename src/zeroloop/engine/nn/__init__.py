"""The policy-value network and its inference."""

from zeroloop.engine.nn.inference import NetworkEvaluator, resolve_device, uniform_evaluator
from zeroloop.engine.nn.net import NetConfig, PolicyValueNet

__all__ = ["NetConfig", "NetworkEvaluator", "PolicyValueNet", "resolve_device", "uniform_evaluator"]
