"""zeroloop: an AlphaZero training pipeline with experiment tracking."""

__version__ = "0.1.0"
