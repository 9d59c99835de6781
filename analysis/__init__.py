"""Run records -> tidy frames, tables, figures, claim checks and reports (load, grid, tables,
figures, claims, report)."""
