"""The suite's Hydra sweeper: every point of a sweep runs (commsgd_sweeper.py)."""
