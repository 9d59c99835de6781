"""Tests of analysis/tuning/."""
