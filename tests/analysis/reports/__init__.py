"""Tests of analysis/reports/."""
