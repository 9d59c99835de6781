"""The README quotes only numbers that a committed result holds (issue 12 item 6: its demo table,
pseudo_sync 0.860 and eamsgd 0.937, was not what `make demo` printed). Every row of a result
table in README.md (a table with a test-accuracy column) must be a row, under the same header,
of a table the suite wrote under results/ (`make demo RESULTS=results`, `make table1`, ...)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tables(text: str) -> list[tuple[tuple[str, ...], list[tuple[str, ...]]]]:
    """Every Markdown table of `text` (also inside code blocks): (header cells, row cells)."""
    found, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip().startswith("|"):
            block.append(tuple(c.strip() for c in line.strip().strip("|").split("|")))
            continue
        if len(block) >= 2:
            header, *rows = block
            rows = [r for r in rows if not all(set(c) <= set(":-") for c in r)]
            found.append((header, rows))
        block = []
    return found


def is_result_table(header: tuple[str, ...]) -> bool:
    return any("test acc" in cell for cell in header)


def test_every_result_row_of_the_readme_is_in_a_committed_result():
    committed = {
        (header, row)
        for path in sorted((REPO / "results").rglob("*.md"))
        for header, rows in tables(path.read_text())
        for row in rows
    }
    quoted = [
        (header, row)
        for header, rows in tables((REPO / "README.md").read_text())
        if is_result_table(header)
        for row in rows
    ]
    assert quoted, "README.md quotes no result table: this test would prove nothing"
    missing = [" | ".join(row) for header, row in quoted if (header, row) not in committed]
    assert not missing, (
        "README.md quotes rows that no committed file under results/ holds (regenerate the "
        "results, e.g. `make demo RESULTS=results`, and copy their tables):\n" + "\n".join(missing)
    )


def test_the_table_reader_sees_what_a_reader_sees():
    text = (
        "x\n| a | final test acc |\n|:--|:--|\n| sync | 0.98 ± 0.01 |\n\n"
        "```\n| b |\n|-|\n| 1 |\n```\n"
    )
    assert tables(text) == [
        (("a", "final test acc"), [("sync", "0.98 ± 0.01")]),
        (("b",), [("1",)]),
    ]
