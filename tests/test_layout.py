"""The rooms of experiments/ (experiments/config/__init__.py lists them) import one way only: a
module imports from its own room and the rooms below it, never above; algorithms/ imports
nothing of experiments/. Read from the source (every import statement, those inside functions
included), so a lazy import up the stack fails here too."""

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
    assert loose == {"__init__", "errors", "runner", "preflight", "sweep"}, loose
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
