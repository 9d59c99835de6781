"""Every committed result rebuilt from its committed records alone, and compared (issue 33).

    python -m analysis.recompute [--results results] [--out outputs/recompute] [RESULT_DIR ...]
    make recompute                                     (the same, OUT=outputs)

For each result folder (`results/<preset>/<scale>/`, or the RESULT_DIRs named) it reads the
report command from `provenance.txt`, runs that report on the folder's `runs.jsonl.gz` instead of
the runs directory it names (no training: seconds), into `<out>/<preset>/<scale>/`, and compares:

- tables and claims (`*.md`, `*.csv`, `*.tex`) and the records: byte for byte;
- the figures by their data: each committed figure is drawn again, from the same records, which
  are byte-identical (the pixels depend on matplotlib's version, the data do not);
- `provenance.txt` line by line, except the lines that name this recomputation (its command, the
  date, the commit of the checkout, where the runs were read from).

One line per result; exit 0 when every result recomputes, 1 when one does not (each differing
file named, with its first differing line), 2 for bad input (one `error:` line).

`--update` (after a change to the analysis: the claims' statistics, the convergence rule)
writes each recomputation into its committed folder instead: the tables, claims and figures
from the same records, `provenance.txt` with the report's original command and a
`recomputed:` line naming this commit. It refuses a checkout with uncommitted changes (the
result must name a commit that holds its code); the records themselves are never rewritten.

A result whose report command is not `analysis.report` or that has no records cannot be
recomputed: that is a difference (exit 1), never skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.records import RECORDS
from experiments.errors import UserError, one_line_errors, refuse_inert_flags
from experiments.store.provenance import REPO

# Provenance lines that name this recomputation rather than the result.
# (`sweep command` is appended by the sweep that made the runs, which a report cannot know.)
OWN_LINES = ("command", "date", "git commit", "runs root", "sweep command", "recomputed")
FIGURE_SUFFIXES = (".png", ".pdf")
# The report's options that say where the runs came from or what may be written: not the
# result's content. Value-taking ones drop their value too.
DROPPED_FLAGS = {"--require-clean": False, "--out-root": True, "--out": True}


def result_dirs(results: Path) -> list[Path]:
    """The result folders under `results`: those holding a `provenance.txt`, sorted."""
    return sorted(p.parent for p in results.glob("*/*/provenance.txt"))


def report_args(result: Path, out: Path) -> list[str]:
    """The committed report's arguments (from its provenance), with the records file as its runs
    and `out` as its output folder."""
    provenance = result / "provenance.txt"
    command = next(
        (
            line[len("command: ") :]
            for line in provenance.read_text().splitlines()
            if line.startswith("command: ")
        ),
        None,
    )
    if command is None:
        raise UserError(f"{provenance}: no command line")
    words = shlex.split(command)
    if words[:3] != ["python", "-m", "analysis.report"]:
        raise UserError(f"{provenance}: made by `{command}`, not by analysis.report")
    args: list[str] = []
    words = words[3:]
    i = 0
    while i < len(words):
        word = words[i]
        flag = word.split("=", 1)[0]
        if flag in DROPPED_FLAGS:
            takes_value = DROPPED_FLAGS[flag] and "=" not in word
            i += 2 if takes_value else 1
            continue
        if word.startswith("--"):
            args.append(word)
            # --experiment NAME, --scale S, --name N, --set K=V, --conf DIR take a value
            if "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("--"):
                args.append(words[i + 1])
                i += 1
        i += 1  # a positional word is a runs root: the records replace it
    records = result / RECORDS
    if not records.is_file():
        raise UserError(f"{result}: no {RECORDS} (the result's runs were not committed)")
    return [*args, str(records), "--out", str(out)]


def _first_difference(committed: Path, recomputed: Path) -> str:
    try:
        a = committed.read_text().splitlines()
        b = recomputed.read_text().splitlines()
    except UnicodeDecodeError:
        return "binary content differs"
    for line in difflib.unified_diff(a, b, lineterm="", n=0):
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++")):
            return line[:160]
    return "whitespace or line ends differ"


def _provenance_lines(path: Path) -> dict[str, str]:
    lines = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(": ")
        if key not in OWN_LINES:
            lines[key] = value
    return lines


def compare(result: Path, out: Path) -> list[str]:
    """The differences between the committed `result` and its recomputation in `out`: one line
    each; none when it recomputes."""
    problems = []
    for committed in sorted(p for p in result.iterdir() if p.is_file()):
        again = out / committed.name
        if not again.is_file():
            problems.append(f"{committed.name}: not produced by the recomputation")
        elif committed.name == "provenance.txt":
            old, new = _provenance_lines(committed), _provenance_lines(again)
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    problems.append(
                        f"provenance.txt: {key}: {old.get(key)!r} recomputed as {new.get(key)!r}"
                    )
        elif committed.suffix in FIGURE_SUFFIXES:
            continue  # drawn again from byte-identical records (checked with the records file)
        elif committed.read_bytes() != again.read_bytes():
            problems.append(f"{committed.name}: {_first_difference(committed, again)}")
    for made in sorted(p for p in out.iterdir() if p.is_file()):
        if not (result / made.name).is_file():
            problems.append(f"{made.name}: recomputed but not committed")
    return problems


def recompute(result: Path, out: Path) -> list[str]:
    """Rebuild `result` into `out` from its records; the differences (`compare`)."""
    failure = quiet_report(report_args(result, out))
    return [failure] if failure else compare(result, out)


def quiet_report(args: Sequence[str]) -> str | None:
    """Run `python -m analysis.report ARGS` in this process, its output kept; None when it
    succeeds, else its last line of error."""
    from analysis.report import main as report_main

    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        code = report_main(list(args))
    if code == 0:
        return None
    said = stderr.getvalue().strip().splitlines()
    return f"the report failed: {said[-1] if said else f'exit {code}'}"


def results_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The arguments of the commands over committed results: RESULT_DIRs, or every result under
    --results."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dirs", nargs="*", type=Path, metavar="RESULT_DIR")
    parser.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="every result folder under DIR, when no RESULT_DIR is named (default: results/)",
    )
    return one_line_errors(parser)


def parse_results_args(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """`parser.parse_args(argv)`, --results refused where RESULT_DIRs are named (it would be
    ignored), its default filled in."""
    args = parser.parse_args(argv)
    refuse_inert_flags(
        parser,
        [
            ("--results", args.results is not None and bool(args.dirs),
             "with RESULT_DIRs named (they are the results; --results DIR, alone, names "
             "every result under DIR)"),
        ],
    )  # fmt: skip
    if args.results is None:
        args.results = REPO / "results"
    return args


def chosen_results(args: argparse.Namespace) -> list[Path]:
    """The RESULT_DIRs named, else every result folder under --results; a UserError when there
    is none."""
    dirs = list(args.dirs) or result_dirs(args.results)
    if not dirs:
        raise UserError(f"no result folders (with provenance.txt) under {args.results}")
    return dirs


def update(result: Path, out: Path, commit: str) -> list[str]:
    """Copy the recomputation in `out` into the committed `result` (module docstring); the
    names of the files that changed."""
    changed = []
    committed = (result / "provenance.txt").read_text().splitlines()
    kept = {
        line.partition(": ")[0]: line
        for line in committed
        if line.partition(": ")[0] in ("command", "sweep command")
    }
    for made in sorted(p for p in out.iterdir() if p.is_file()):
        target = result / made.name
        if made.name == RECORDS:
            continue  # the records are the result's; never rewritten
        data = made.read_bytes()
        if made.name == "provenance.txt":
            lines = []
            for line in made.read_text().splitlines():
                key = line.partition(": ")[0]
                if key == "recomputed":
                    continue
                lines.append(kept.pop(key, line))
            lines += list(kept.values())
            lines.append(
                f"recomputed: from {RECORDS} by python -m analysis.recompute --update at {commit}"
            )
            data = ("\n".join(lines) + "\n").encode()
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
            changed.append(made.name)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    from analysis.report import git_commit

    parser = results_parser("python -m analysis.recompute", __doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/recompute"), metavar="DIR")
    parser.add_argument(
        "--update",
        action="store_true",
        help="write each recomputation into its committed folder (a clean checkout only)",
    )
    args = parse_results_args(parser, argv)
    try:
        dirs = chosen_results(args)
        for d in dirs:
            if not (d / "provenance.txt").is_file():
                raise UserError(f"{d}: not a result folder (no provenance.txt)")
        commit = git_commit()
        if args.update and commit.endswith("-dirty"):
            raise UserError(
                "--update refuses a checkout with uncommitted changes to tracked files: the "
                "results must name a commit that holds their code (commit or stash them)"
            )
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.update:
        for result in dirs:
            name = f"{result.parent.name}/{result.name}"
            out = args.out / result.parent.name / result.name
            if out.exists():
                shutil.rmtree(out)
            failure = quiet_report(report_args(result, out))
            if failure:
                print(f"{name}: {failure}", file=sys.stderr)
                return 1
            changed = update(result, out, commit)
            print(f"{name}: {'updated ' + ', '.join(changed) if changed else 'unchanged'}")
        return 0
    failed = []
    for result in dirs:
        name = f"{result.parent.name}/{result.name}"
        out = args.out / result.parent.name / result.name
        if out.exists():
            shutil.rmtree(out)
        try:
            problems = recompute(result, out)
        except UserError as error:
            problems = [str(error)]
        if problems:
            failed.append(name)
            print(f"{name}: DIFFERS")
            for problem in problems:
                print(f"  - {problem}")
        else:
            files = sorted(p.name for p in result.iterdir() if p.is_file())
            figures = sum(Path(f).suffix in FIGURE_SUFFIXES for f in files)
            print(
                f"{name}: identical ({len(files) - figures - 1} files byte for byte, "
                f"{figures} figures redrawn from identical records, provenance consistent)"
            )
    return outcome(
        failed,
        f"{len(failed)} of {len(dirs)} results do not recompute",
        f"all {len(dirs)} results recompute from their records (into {args.out})",
    )


def outcome(failed: list[str], failure: str, success: str) -> int:
    """A check's last line and exit code (here and in analysis/verify.py): `failure` with the
    names in `failed` and 1 where any failed, else `success` and 0."""
    print(f"{failure}: {', '.join(failed)}" if failed else success)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
