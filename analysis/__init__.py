"""Run records -> tidy frames, tables and figures (load, tables, figures, report)."""
