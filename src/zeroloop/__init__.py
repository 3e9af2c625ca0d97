"""zeroloop: an AlphaZero training pipeline with experiment tracking.

Three layers, each importing only the ones below it (an import-linter contract
in pyproject.toml, checked by the test suite, keeps it so)::

    zeroloop.apps       cli, play, serve, record viewer, analyse
    zeroloop.pipeline   params, stages, generation steps, training, tracking, tuning, storage, pools
    zeroloop.engine     games, search, network, arena, players, ratings, positions
"""

__version__ = "0.1.0"
