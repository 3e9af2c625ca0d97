"""The engine: games, search, the network and its inference, games between
players, ratings and solver-labelled positions. Imports numpy, numba and torch,
nothing of the pipeline or the apps, and none of the MLOps tools."""
