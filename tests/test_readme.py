"""The README and docs/ quote only numbers that a committed result holds, and stay usable.

Issue 12 item 6: the README's demo table (pseudo_sync 0.860 and eamsgd 0.937) was not what
`make demo` printed. Every row of a result table in README.md or a page of docs/ (a table with a
test-accuracy column) must be a row, under the same header, of a table the suite wrote under
results/ (`make demo RESULTS=results`, `make table1`, ...).

Issue 37: the README's first screen is enough (set-up, one run, a sweep, where results go), the
rest is one page per topic under docs/, every relative link resolves, and the project carries
its own docs (no file points outside the checkout to a shared docs folder)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# docs/config.md is generated from the schema (`make docs`, tests/test_schema.py): it quotes no
# result, but its links are checked like every page's.
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 300
FIRST_SCREEN = 60


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
    """A table the report writes: a column of test accuracy ("final test acc"), not prose
    about accuracy ("test accuracy per epoch" in docs/datasets.md)."""
    return any(re.search(r"\btest acc\b", cell) for cell in header)


def committed_rows() -> set[tuple[tuple[str, ...], tuple[str, ...]]]:
    return {
        (header, row)
        for path in sorted((REPO / "results").rglob("*.md"))
        for header, rows in tables(path.read_text())
        for row in rows
    }


def quoted_rows(path: Path) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return [
        (header, row)
        for header, rows in tables(path.read_text())
        if is_result_table(header)
        for row in rows
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_result_row_of_the_docs_is_in_a_committed_result(page: Path):
    committed = committed_rows()
    missing = [
        " | ".join(row) for header, row in quoted_rows(page) if (header, row) not in committed
    ]
    assert not missing, (
        f"{page.relative_to(REPO)} quotes rows that no committed file under results/ holds "
        "(regenerate the results, e.g. `make demo RESULTS=results`, and copy their tables):\n"
        + "\n".join(missing)
    )


def test_the_docs_quote_result_tables_at_all():
    """Otherwise the test above would prove nothing."""
    assert sum(len(quoted_rows(page)) for page in PAGES) >= 20


def test_the_table_reader_sees_what_a_reader_sees():
    text = (
        "x\n| a | final test acc |\n|:--|:--|\n| sync | 0.98 ± 0.01 |\n\n"
        "```\n| b |\n|-|\n| 1 |\n```\n"
    )
    assert tables(text) == [
        (("a", "final test acc"), [("sync", "0.98 ± 0.01")]),
        (("b",), [("1",)]),
    ]
    assert is_result_table(("a", "final test acc"))
    assert not is_result_table(("epochs", "test accuracy per epoch"))


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move a topic to docs/"
    )


def test_the_readme_first_screen_is_enough():
    """Set-up, the test command, a sweep with the virtual environment made explicit, and where
    the verdicts are: all in the first 60 lines."""
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    for needed in ("make demo", "make test", "run.py -m", ".venv", "](results/README.md)"):
        assert needed in first, f"README.md's first {FIRST_SCREEN} lines do not mention {needed!r}"


def test_the_readme_verdict_count_is_the_verdicts_page():
    """The README's count of verdicts is the committed page's (analysis/reports/verdict_page.py)."""

    def count(path: Path) -> list[str]:
        return [ln for ln in path.read_text().splitlines() if ln.startswith("Verdicts (tested")]

    page = count(REPO / "results" / "README.md")
    assert len(page) == 1, "results/README.md has no 'Verdicts (tested ...' line"
    assert count(README) == page, (
        "README.md's 'Verdicts (tested ...' line differs from results/README.md's: copy it"
    )


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(text: str) -> list[str]:
    """The targets of the Markdown links of `text` that point into the checkout (outside code
    blocks and code spans; no scheme, no pure anchor), without their anchors."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path):
    broken = [
        target
        for target in relative_links(page.read_text())
        if not (page.parent / target).resolve().exists()
    ]
    assert not broken, f"{page.relative_to(REPO)} links to files that do not exist: {broken}"


def test_the_link_reader_sees_what_a_reader_sees():
    text = (
        "[a](docs/a.md) [b](../b.md#x) [c](#anchor) [d](https://x.org/y) ![e](fig.png)\n"
        "`[f](code.md)`\n```\n[g](block.md)\n```\n<https://z.org>\n"
    )
    assert relative_links(text) == ["docs/a.md", "../b.md", "fig.png"]


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout: {e}")
    return [REPO / name for name in out.decode().split("\0") if name]


def test_the_project_carries_its_own_docs():
    """No tracked file points to a docs folder outside the checkout (a sibling `shared`
    folder, or its `docs`): what the suite says about itself is in docs/."""
    patterns = ("../" + "shared/", "shared/" + "docs")  # split so that this file does not match
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        offenders += [f"{path.relative_to(REPO)}: {p}" for p in patterns if p in text]
    assert not offenders, "files that point outside the checkout for docs:\n" + "\n".join(offenders)
