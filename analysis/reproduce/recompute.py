"""Every committed result rebuilt from its committed records alone, and compared (issue 33).

    python -m analysis.reproduce.recompute [--results results] [--out outputs/recompute]
        [RESULT_DIR ...]
    make recompute                                     (the same, OUT=outputs)

A result folder is a folder `<results>/<preset>/<scale>/` holding any file: it must hold
`provenance.txt` and `runs.jsonl.gz`; a part missing is a difference naming it, never a skip.
For each result (or the RESULT_DIRs named) it reads the report command from `provenance.txt`,
runs that report on the folder's `runs.jsonl.gz` instead of the runs directory it names (no
training: seconds), into `<out>/<preset>/<scale>/`, and compares:

- tables and claims (`*.md`, `*.csv`, `*.tex`) and the records: byte for byte;
- the figures by their data: each committed figure is drawn again, from the same records, which
  are byte-identical (the pixels depend on matplotlib's version, the data do not);
- `provenance.txt` line by line, except the lines that name this recomputation (its command, the
  date, the commit of the checkout, where the runs were read from).

One line per result; exit 0 when every result recomputes, 1 when one does not (each differing
file named, with its first differing line), 2 for bad input (one `error:` line), 130 for Ctrl-C
and 128 + N for stop signal N (one `error:` line, analysis/stops.py: nothing is said of the
result in progress, the command stops at once).

What it writes: each recomputation into `<out>/<preset>/<scale>/` (staged beside it by the
report and swapped in whole: a stop leaves the previous recomputation or none). `--out` onto a
file, onto or inside a result it recomputes, inside a committed results tree, or onto a folder
holding files no report writes, is refused before any work (exit 2); nothing else is deleted.

`--update` (after a change to the analysis: the claims' statistics, the convergence rule)
writes each recomputation into its committed folder instead: the tables, claims and figures
from the same records, `provenance.txt` with the report's original command and a
`recomputed:` line naming this commit. It refuses a checkout with uncommitted changes (the
result must name a commit that holds its code); the records themselves are never rewritten, no
committed file is deleted, and a result that recomputes unchanged (its provenance too, but for
the lines naming the recomputation) is left untouched, byte for byte. Each file is written
atomically, and the stop signals wait while a result's files are written (a stop leaves a
result updated whole or not at all); a write that fails is one line naming the file (exit 1).

A result whose report command is not `analysis.reports.report` or that has no records cannot be
recomputed: that is a difference (exit 1), never skipped.
"""

from __future__ import annotations

if __name__ == "__main__":  # a stop while the analysis imports (seconds): one line, no work
    from analysis.stops import stop_early

    stop_early("recompute")

import argparse  # noqa: E402 - after the stop handlers above
import contextlib
import difflib
import io
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.runs.records import RECORDS, read_records
from analysis.stops import STOP_SIGNALS, stoppable
from experiments.errors import (
    OneLine,
    OutputError,
    Stopped,
    UserError,
    one_line_errors,
    refuse_inert_flags,
)
from experiments.store import records as run_records
from experiments.store.provenance import REPO
from experiments.workers.startup import stops_held

# Provenance lines that name this recomputation rather than the result.
# (`sweep command` is appended by the sweep that made the runs, which a report cannot know.)
OWN_LINES = ("command", "date", "git commit", "runs root", "sweep command", "recomputed")
FIGURE_SUFFIXES = (".png", ".pdf")
# The report's options that say where the runs came from or what may be written: not the
# result's content. Value-taking ones drop their value too.
DROPPED_FLAGS = {"--require-clean": False, "--out-root": True, "--out": True}
PROVENANCE = "provenance.txt"
# The report's module: its place since issue 51, and before (the committed results' provenance
# names `analysis.report`, the report's module until the analysis rooms).
REPORT_MODULES = ("analysis.reports.report", "analysis.report")


def result_dirs(results: Path) -> list[Path]:
    """The result folders under `results`: each `<preset>/<scale>/` folder holding a file (a
    result missing its provenance.txt or records is still one: `missing_parts` names them)."""
    if not results.is_dir():
        return []
    return sorted(
        p
        for p in results.glob("*/*")
        if p.is_dir() and any(f.is_file() and not f.name.startswith(".") for f in p.iterdir())
    )


def missing_parts(result: Path) -> list[str]:
    """The parts every result must have (its provenance and its records) that `result` lacks,
    one line each."""
    missing = []
    for part, why in (
        (PROVENANCE, "nothing says how the result was made"),
        (RECORDS, "the result's runs were not committed"),
    ):
        if (result / part).exists() and not (result / part).is_file():
            missing.append(f"{result / part}: not a file")
        elif not (result / part).is_file():
            missing.append(f"{result}: no {part} ({why})")
    return missing


def report_args(result: Path, out: Path) -> list[str]:
    """The committed report's arguments (from its provenance), with the records file as its runs
    and `out` as its output folder."""
    provenance = result / PROVENANCE
    try:
        text = run_records.read_text(provenance)
    except FileNotFoundError:
        raise UserError(
            f"{result}: no {PROVENANCE} (nothing says how the result was made)"
        ) from None
    command = next(
        (line[len("command: ") :] for line in text.splitlines() if line.startswith("command: ")),
        None,
    )
    if command is None:
        raise UserError(f"{provenance}: no command line")
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise UserError(f"{provenance}: its command line does not parse ({error})") from None
    if len(words) < 3 or words[:2] != ["python", "-m"] or words[2] not in REPORT_MODULES:
        raise UserError(f"{provenance}: made by `{command}`, not by analysis.reports.report")
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
    """The provenance's lines that describe the result (OWN_LINES aside)."""
    from analysis.reports.staging import provenance_fields

    fields = provenance_fields(run_records.read_text(path))
    return {key: value for key, value in fields.items() if key not in OWN_LINES}


def compare(result: Path, out: Path) -> list[str]:
    """The differences between the committed `result` and its recomputation in `out`: one line
    each; none when it recomputes."""
    problems = []
    for committed in sorted(p for p in result.iterdir() if p.is_file()):
        again = out / committed.name
        if not again.is_file():
            problems.append(f"{committed.name}: not produced by the recomputation")
        elif committed.name == PROVENANCE:
            old, new = _provenance_lines(committed), _provenance_lines(again)
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    problems.append(
                        f"{PROVENANCE}: {key}: {old.get(key)!r} recomputed as {new.get(key)!r}"
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
    """Rebuild `result` into `out` from its records; the differences (`compare`), or what is
    missing or damaged (a UserError's line)."""
    try:
        missing = missing_parts(result)
        if missing:
            return missing
        read_records(result / RECORDS)  # a damaged record: named here, line and field
        failure = quiet_report(report_args(result, out))
        return [failure] if failure else compare(result, out)
    except UserError as error:
        return [str(error)]


def quiet_report(args: Sequence[str]) -> str | None:
    """Run `python -m analysis.reports.report ARGS` in this process, its output kept; None when it
    succeeds, else its last line of error. A stop the report took (it catches them itself and
    returns) is raised again here: the command stops, it is no difference of the result."""
    from analysis.reports.report import main as report_main

    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        code = report_main(list(args))
    if code == 0:
        return None
    _raise_a_stop(code)
    said = stderr.getvalue().strip().splitlines()
    last = said[-1] if said else ""
    return f"the report failed: {last or f'exit {code}'}"


def _raise_a_stop(code: int) -> None:
    """The stop that ended the report (its exit code 128 + N: 130 for Ctrl-C), raised as the
    stop analysis/stops.py turns into this command's line and code."""
    signum = code - 128
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    if signum in {int(s) for s in STOP_SIGNALS}:
        raise Stopped(signum)


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
    is none, or when a RESULT_DIR named is no folder."""
    if not args.dirs:
        dirs = result_dirs(args.results)
        if not dirs:
            raise UserError(
                f"no result folders (<preset>/<scale>/ with files) under {args.results}"
            )
        return dirs
    for d in args.dirs:
        if not d.is_dir():
            raise UserError(f"{d}: not a result folder (no {PROVENANCE}, no {RECORDS})")
    seen: dict[Path, Path] = {}
    for d in args.dirs:
        if d.resolve() in seen:
            raise UserError(f"{d}: named twice (as {seen[d.resolve()]})")
        seen[d.resolve()] = d
    return list(args.dirs)


def results_trees(args: argparse.Namespace) -> list[Path]:
    """The committed results trees a command must not write into: the checkout's results/ and
    --results."""
    return sorted({(REPO / "results").resolve(), args.results.resolve()})


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def refuse_out(out: Path, dirs: Sequence[Path], trees: Sequence[Path], what: str) -> None:
    """A UserError when `out` (a command's --out, for `what`) is a file, or lies in a result
    the command reads or in a committed results tree: nothing there may be written."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder: name a folder for {what}")
    where = out.resolve()
    for d in dirs:
        if _within(where, d.resolve()):
            raise UserError(
                f"--out {out} is inside the result {d} (the command's input): name a scratch "
                f"folder for {what}, e.g. outputs/"
            )
    for tree in trees:
        if _within(where, tree):
            raise UserError(
                f"--out {out} is inside the committed results tree {tree}: name a scratch "
                f"folder for {what}, e.g. outputs/"
            )


def targets(dirs: Sequence[Path], out: Path) -> dict[Path, Path]:
    """Each result's recomputation folder, `<out>/<preset>/<scale>`; a UserError when one would
    replace (or hold) a result, when two results would share one, or when one holds anything
    a report does not write (someone's folder: replacing it would delete their files)."""
    from analysis.reports.staging import report_files

    made: dict[Path, Path] = {}
    allowed = report_files()
    for d in dirs:
        target = out / d.resolve().parent.name / d.resolve().name
        for other in dirs:
            if _within(target.resolve(), other.resolve()) or _within(
                other.resolve(), target.resolve()
            ):
                raise UserError(
                    f"--out {out} would replace the result {other} (the command's input) by "
                    f"a recomputation: name a scratch folder, e.g. outputs/recompute"
                )
        if target in made.values():
            raise UserError(f"{d}: its recomputation would replace another's in {target}")
        if target.exists() and not target.is_dir():
            raise UserError(f"--out: {target} is a file, not a folder for a recomputation")
        if target.is_dir():
            alien = next((p.name for p in target.iterdir() if p.name not in allowed), None)
            if alien is not None:
                raise UserError(
                    f"--out: {target} holds {alien}, which no recomputation writes: it is not "
                    f"replaced (name another --out)"
                )
        made[d] = target
    return made


def modified_files() -> list[str]:
    """The checkout's tracked files that differ from its commit (results/ aside, as
    experiments.store.records.git_commit counts them); [] where git cannot tell."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
             ":(top)", ":(top,exclude)results"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in done.stdout.splitlines() if line.strip()]


def checkout_line(commit: str, modified: Sequence[str]) -> str:
    """`this checkout: <commit>`, naming its modified files (up to 10) where it has any."""
    line = f"this checkout: {commit}"
    if modified:
        more = f" and {len(modified) - 10} more" if len(modified) > 10 else ""
        line += f"; {len(modified)} modified tracked files: {', '.join(modified[:10])}{more}"
    return line


def update(result: Path, out: Path, commit: str) -> list[str]:
    """Copy the recomputation in `out` into the committed `result` (module docstring); the
    names of the files that changed. A result that recomputes unchanged is left untouched."""
    committed = run_records.read_text(result / PROVENANCE).splitlines()
    kept = {
        line.partition(": ")[0]: line
        for line in committed
        if line.partition(": ")[0] in ("command", "sweep command")
    }
    writes: dict[Path, bytes] = {}
    for made in sorted(p for p in out.iterdir() if p.is_file()):
        if made.name in (RECORDS, PROVENANCE):
            continue  # the records are the result's, never rewritten; provenance below
        target = result / made.name
        data = made.read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            writes[target] = data
    if not writes and _provenance_lines(result / PROVENANCE) == _provenance_lines(out / PROVENANCE):
        return []  # unchanged: not even its provenance's date and commit are rewritten
    lines = []
    for line in run_records.read_text(out / PROVENANCE).splitlines():
        key = line.partition(": ")[0]
        if key == "recomputed":
            continue
        lines.append(kept.pop(key, line))
    lines += list(kept.values())
    lines.append(
        f"recomputed: from {RECORDS} by python -m analysis.reproduce.recompute --update at {commit}"
    )
    writes[result / PROVENANCE] = ("\n".join(lines) + "\n").encode()
    for target in writes:
        if target.exists() and not target.is_file():
            raise UserError(f"{target}: not a file: the result is not updated")
    with stops_held():
        _write_all(writes)
    return [target.name for target in writes]


def _write_all(writes: dict[Path, bytes]) -> None:
    """Each file's new bytes written beside it first (`staged`: fsynced temporaries), then
    renamed into place: a failed write (a full disk) changes none of them (an OutputError
    naming it)."""
    import os

    temporaries: list[tuple[str, Path]] = []
    try:
        for target, data in writes.items():
            temporaries.append((run_records.staged(target, data), target))
        for tmp, target in temporaries:
            try:
                os.replace(tmp, target)
            except OSError as error:
                raise OutputError(target, error) from None
    finally:
        for tmp, _ in temporaries:
            Path(tmp).unlink(missing_ok=True)


@stoppable("recompute")
def main(argv: Sequence[str] | None = None) -> int:
    parser = results_parser("python -m analysis.reproduce.recompute", __doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/recompute"), metavar="DIR")
    parser.add_argument(
        "--update",
        action="store_true",
        help="write each recomputation into its committed folder (a clean checkout only)",
    )
    args = parse_results_args(parser, argv)
    try:
        dirs = chosen_results(args)
        refuse_out(args.out, dirs, results_trees(args), "the recomputations")
        outs = targets(dirs, args.out)
        from analysis.reports.report import git_commit

        commit = git_commit()
        if args.update:
            if commit.endswith("-dirty"):
                raise UserError(
                    "--update refuses a checkout with uncommitted changes to tracked files: the "
                    "results must name a commit that holds their code (commit or stash them)"
                )
            for d in dirs:  # a result updated is a whole one: its parts first, for every one
                missing = missing_parts(d)
                if missing:
                    raise UserError(f"{missing[0]}: --update cannot recompute it")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.update:
        return _update_all(dirs, outs, commit)
    print(checkout_line(commit, modified_files() if commit.endswith("-dirty") else []))
    failed = []
    for result in dirs:
        name = f"{result.resolve().parent.name}/{result.resolve().name}"
        problems = recompute(result, outs[result])
        if problems:
            failed.append(name)
            print(f"{name}: DIFFERS", flush=True)
            for problem in problems:
                print(f"  - {problem}")
        else:
            files = sorted(p.name for p in result.iterdir() if p.is_file())
            figures = sum(Path(f).suffix in FIGURE_SUFFIXES for f in files)
            print(
                f"{name}: identical ({len(files) - figures - 1} files byte for byte, "
                f"{figures} figures redrawn from identical records, provenance consistent)",
                flush=True,
            )
    return outcome(
        failed,
        f"{len(failed)} of {len(dirs)} results do not recompute",
        f"all {len(dirs)} results recompute from their records (into {args.out})",
    )


def _update_all(dirs: Sequence[Path], outs: dict[Path, Path], commit: str) -> int:
    """--update: each result recomputed into its --out folder, then written into its committed
    folder where it changed (`update`)."""
    for result in dirs:
        name = f"{result.resolve().parent.name}/{result.resolve().name}"
        try:
            read_records(result / RECORDS)
            failure = quiet_report(report_args(result, outs[result]))
            if failure:
                print(f"error: {name}: {failure}", file=sys.stderr)
                return 1
            changed = update(result, outs[result], commit)
        except OneLine as error:  # a damaged part (exit 2 before any write), a failed write
            print(f"error: {name}: {error}", file=sys.stderr)
            return error.exit_code
        print(f"{name}: {'updated ' + ', '.join(changed) if changed else 'unchanged'}", flush=True)
    return 0


def outcome(failed: list[str], failure: str, success: str) -> int:
    """A check's last line and exit code (here and in analysis/reproduce/verify.py): where any
    failed, `error: <failure>: <the names in failed>` on stderr (a failure's one line) and 1, else
    `success` on stdout and 0."""
    if failed:
        sys.stdout.flush()  # the per-result lines first
        print(f"error: {failure}: {', '.join(failed)}", file=sys.stderr, flush=True)
        return 1
    print(success)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
