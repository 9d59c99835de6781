"""Tests of analysis/, one folder per room (analysis/__init__.py lists the rooms)."""
