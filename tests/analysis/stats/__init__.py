"""Tests of analysis/stats/."""
