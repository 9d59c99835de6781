"""Tests of analysis/runs/."""
