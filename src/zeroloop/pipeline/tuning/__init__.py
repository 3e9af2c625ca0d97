"""Optuna studies over the search and self-play settings."""
