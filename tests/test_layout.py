"""The house's layout, read from the source (every import statement, those inside functions
included, so a lazy import up the stack fails here too):

- the floors: algorithms <- experiments <- analysis, benchmarks <- run.py; a package imports
  only from its own floor and those below (algorithms/ nothing of experiments/, experiments/
  nothing of analysis/ or benchmarks/);
- the rooms of experiments/ (experiments/config/__init__.py lists them) import one way only: a
  module imports from its own room and the rooms below it, never above;
- no import circle among the suite's modules;
- no module over 800 lines without the reason in its docstring."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lowest first. `errors` is everyone's; the package's __init__ registers the config only.
ORDER = ["errors", "config", "data", "store", "training", "workers", "top"]
TOP_LEVEL = {"errors": "errors", "__init__": "config"}


def room(module: str) -> str:
    """The room of `experiments.<...>` (a dotted module name)."""
    parts = module.split(".")
    assert parts[0] == "experiments", module
    if len(parts) == 1:
        return "config"
    if parts[1] in ORDER:
        return parts[1]
    return TOP_LEVEL.get(parts[1], "top")


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every experiments import in `path`; `from experiments import x` counts
    as `experiments.x`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "experiments":
                found += [(node.lineno, f"experiments.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, m) for line, m in found if m.split(".")[0] == "experiments"]


def test_rooms_import_downwards_only():
    wrong = []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        own = room(".".join(rel.parts))
        for line, module in imported(path):
            if ORDER.index(room(module)) > ORDER.index(own):
                wrong.append(f"{rel}.py:{line} ({own}) imports {module} ({room(module)})")
    assert not wrong, "\n".join(wrong)


def test_every_module_is_in_a_room():
    """No module lies loose in experiments/ but the entry points and the errors."""
    loose = {p.stem for p in (ROOT / "experiments").glob("*.py")}
    assert loose == {"__init__", "errors", "runner", "worker", "preflight", "sweep"}, loose
    for name in ORDER[1:-1]:
        assert (ROOT / "experiments" / name / "__init__.py").exists(), name


def test_algorithms_know_no_experiment():
    for path in sorted((ROOT / "algorithms").rglob("*.py")):
        assert not imported(path), path


def test_the_room_check_sees_a_lazy_import_upwards(tmp_path):
    """The check itself: an import inside a function, up the stack, is found."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from experiments.workers import dist\n")
    assert imported(source) == [(2, "experiments.workers")]
    assert ORDER.index(room("experiments.workers.dist")) > ORDER.index(room("experiments.data"))


# --- The floors of the whole suite ----------------------------------------------------------------
#
# The same reading of the source, for every module of the suite's packages and run.py. Counted:
# every `import` and `from ... import` statement anywhere in a module (at its top, inside a
# function, under `if TYPE_CHECKING`), relative ones resolved against the module's package.
# `from package import name` counts as an import of the submodule `package.name` when there is
# one, else of the package; `import a.b.c` counts as an import of `a.b.c` (the nearest module of
# the suite it names). The parent packages an import runs on the way (`a`, `a.b`) are not
# counted: they hold only what their docstrings say, and counting them would make every package
# a circle with its own modules.

PACKAGES = ("algorithms", "experiments", "analysis", "benchmarks")
#: Lowest first: a package imports only from its own floor and those below it.
FLOORS = {"algorithms": 0, "experiments": 1, "analysis": 2, "benchmarks": 2, "run": 3}


def suite_modules() -> dict[str, Path]:
    """Every module of the suite: dotted name (a package by its own name) -> file."""
    modules = {"run": ROOT / "run.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def suite_imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every import of a suite module by module `name` (file `path`), as the
    section's comment counts them; the module's imports of itself left out."""

    def nearest(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, nearest(a.name)) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package[: len(package) - node.level + 1]
                base = ".".join([*above, *([node.module] if node.module else [])])
            for a in node.names:
                whole = f"{base}.{a.name}"
                found.append((node.lineno, whole if whole in modules else nearest(base)))
    return [(line, m) for line, m in found if m is not None and m != name]


def import_graph() -> dict[str, set[str]]:
    modules = suite_modules()
    return {
        name: {m for _, m in suite_imports(name, path, modules)} for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The circles of `graph`: its strongly connected components of more than one module
    (Tarjan's algorithm, iterative: the suite's import chains are deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_cycle():
    unknown = [sorted(c) for c in cycles(import_graph())]
    assert not unknown, unknown


def test_no_import_from_a_lower_floor_upwards():
    modules = suite_modules()
    wrong = []
    for name, path in modules.items():
        floor = FLOORS[name.split(".")[0]]
        for line, module in suite_imports(name, path, modules):
            if FLOORS[module.split(".")[0]] > floor:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_graph_check_sees_circles_and_relative_imports(tmp_path):
    """The check itself: a circle through a lazy relative import is read and found."""
    package = tmp_path / "p"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from p import b\n")
    (package / "b.py").write_text("def f():\n    from . import a\n")
    modules = {"p": package / "__init__.py", "p.a": package / "a.py", "p.b": package / "b.py"}
    assert suite_imports("p.b", modules["p.b"], modules) == [(2, "p.a")]
    graph = {n: {m for _, m in suite_imports(n, p, modules)} for n, p in modules.items()}
    assert cycles(graph) == [{"p.a", "p.b"}]
    assert cycles({"x": {"y"}, "y": set()}) == []


# --- Files a reader can hold ----------------------------------------------------------------------
#
# No module of the suite over MAX_LINES lines unless its docstring gives the reason in a sentence
# beginning "One file because" (a file that must not be split, e.g. one a paper is read against).
# Tests are left out: a test file is read one test at a time, and splitting one spreads a
# subject's cases over several files.

MAX_LINES = 800


def test_no_file_over_the_limit_without_its_reason():
    long = []
    for path in [*suite_modules().values(), *sorted((ROOT / "hydra_plugins").rglob("*.py"))]:
        rel = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "One file because" not in " ".join(doc.split()):
            long.append(f"{rel}: {lines} lines")
    assert not long, "\n".join(long)


# --- The rooms of analysis/ -----------------------------------------------------------------------
#
# analysis/__init__.py lists them: each imports from its own room and the rooms listed above it
# (a lower number), never from one at its own number but another room (reproduce and tuning are
# peers) or above. `stops` is the one module at the top of analysis/, everyone's.

ANALYSIS_ROOMS = {
    "stops": 0,
    "runs": 1,
    "stats": 2,
    "claims": 3,
    "reports": 4,
    "reproduce": 5,
    "tuning": 5,
}


def analysis_room(module: str) -> str:
    """The room of `analysis.<...>`: its sub-package, or `stops`; the package itself is
    everyone's (its docstring only)."""
    parts = module.split(".")
    assert parts[0] == "analysis", module
    return parts[1] if len(parts) > 1 else "stops"


def test_analysis_rooms_import_downwards_only():
    modules = suite_modules()
    wrong = []
    for name, path in modules.items():
        if not name.startswith("analysis."):
            continue
        own = analysis_room(name)
        for line, module in suite_imports(name, path, modules):
            if not module.startswith("analysis"):
                continue
            other = analysis_room(module)
            if other != own and ANALYSIS_ROOMS[other] >= ANALYSIS_ROOMS[own]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {module} ({other})")
    assert not wrong, "\n".join(wrong)


def test_analysis_is_in_rooms_each_saying_what_it_offers():
    """At most six modules at the top of analysis/; every room a package whose docstring names
    each of its modules, and no folder of analysis/ that is not a room."""
    top = sorted(p.name for p in (ROOT / "analysis").glob("*.py"))
    assert len(top) <= 6 and top == ["__init__.py", "stops.py"], top
    folders = {p.name for p in (ROOT / "analysis").iterdir() if p.is_dir()} - {"__pycache__"}
    assert folders == set(ANALYSIS_ROOMS) - {"stops"}, folders
    for room in folders:
        init = ROOT / "analysis" / room / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        unnamed = [
            p.name
            for p in sorted(init.parent.glob("*.py"))
            if p.name != "__init__.py" and p.name not in doc
        ]
        assert not unnamed, f"analysis/{room}/__init__.py does not name {unnamed}"


def test_every_module_says_what_it_is_for():
    """The first lines of every module of the suite are its docstring."""
    silent = [
        str(path.relative_to(ROOT))
        for path in [*suite_modules().values(), *sorted((ROOT / "hydra_plugins").rglob("*.py"))]
        if not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert not silent, silent


def test_the_analysis_room_check_sees_an_import_upwards():
    """The check itself: claims importing the reports is upwards; tuning and reproduce are
    peers, so neither may import the other."""
    assert ANALYSIS_ROOMS[analysis_room("analysis.reports.tables")] > ANALYSIS_ROOMS["claims"]
    assert analysis_room("analysis.stops") == "stops"
    rank = ANALYSIS_ROOMS
    assert rank[analysis_room("analysis.tuning.tune")] == rank["reproduce"]
