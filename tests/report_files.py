"""What the report tests share: the figure files a report writes into its --out folder, in the
order the report CLI prints their paths (tests/analysis/reports/test_analysis.py,
tests/analysis/reports/test_report.py)."""

FIGURE_FILES = (
    "test_acc.png",
    "test_acc.pdf",
    "time.png",
    "time.pdf",
    "time_breakdown.png",
    "time_breakdown.pdf",
)
