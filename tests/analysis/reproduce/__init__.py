"""Tests of analysis/reproduce/."""
