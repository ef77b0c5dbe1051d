"""No import loops in the package, and imports that run down the stages: every module's
imports (module level and inside functions alike, read with ast, nothing executed) form a
graph without cycles, and no module imports one of a stage above its own (store <-
extraction <- training <- scoring <- studies <- paper; docs/architecture.md), so each
module can be read, tested and changed below the ones that use it."""

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flowclip_cache")


def package_modules(root: str = ROOT) -> dict[str, str]:
    """module name -> file, for every .py under the package."""
    out = {}
    base = os.path.dirname(root)
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


def imports_of(name: str, path: str, modules: dict[str, str]) -> set[str]:
    """The package modules `name` imports (a `from X import y` counts X.y when y is a
    module, else X)."""
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_package_has_no_import_loops():
    modules = package_modules()
    graph = {m: imports_of(m, p, modules) for m, p in modules.items()}
    assert len(graph) > 50
    assert cycles(graph) == [], "import loops (each list imports itself round): " + str(cycles(graph))


def unresolved_imports(modules: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, module) of every `from X import ...` inside the package whose X is no
    module of it: a stale path left in a function body fails here, not when that
    function first runs."""
    out = []
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if not isinstance(node, ast.ImportFrom) or not (
                node.level or (node.module or "").startswith("flowclip_cache")
            ):
                continue
            parts = package.split(".")
            base = (
                ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                if node.level
                else node.module or ""
            )
            if base not in modules:
                out.append((os.path.relpath(path, ROOT), node.lineno, base))
    return out


def test_every_import_names_a_module_of_the_package(tmp_path):
    assert unresolved_imports(package_modules()) == []
    pkg = tmp_path / "flowclip_cache"  # the check itself: a stale import inside a function is found
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "progress.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "store" / "banks.py").write_text("def f():\n    from .progress import bar\n    from ..progress import bar\n")
    assert unresolved_imports(package_modules(str(pkg))) == [
        (os.path.relpath(str(pkg / "store" / "banks.py"), ROOT), 2, "flowclip_cache.store.progress")
    ]


def test_the_cycle_finder_finds_a_loop(tmp_path):
    """The check itself: a planted a -> b -> c -> a loop (through a function-level import)
    is found; a chain is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("from .c import thing\n")
    (pkg / "c.py").write_text("def thing():\n    from .a import x\n")
    (pkg / "d.py").write_text("from .a import y\n")
    modules = package_modules(str(pkg))
    graph = {m: imports_of(m, p, modules) for m, p in modules.items()}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    (pkg / "c.py").write_text("def thing():\n    pass\n")
    graph = {m: imports_of(m, p, package_modules(str(pkg))) for m, p in modules.items()}
    assert cycles(graph) == []


# The stages, lowest first. Below them the shared ground (errors, hashing, config, manifest,
# outputs, heads/, datasets/, synthetic/, ...): it imports no stage. Above them the surface
# (the CLI, the Python API, sweep and publish), which may import anything.
STAGES = ("store", "extraction", "training", "scoring", "studies", "paper")
SURFACE = ("api", "cli", "commands", "sharing", "__main__")
# The one arrow upward, by name: the paper plan's steps are command lines, and its runner
# executes them through the CLI in-process (paper/runner.py, `run_command`).
UPWARD_ALLOWED = {("flowclip_cache.paper.runner", "flowclip_cache.cli")}


def layer(module: str) -> int:
    """0 for the shared ground, 1.. for the stages in order, above them the surface."""
    part = module.split(".")[1] if "." in module else "__init__"
    if part in STAGES:
        return 1 + STAGES.index(part)
    return len(STAGES) + 1 if part in SURFACE or part == "__init__" else 0


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (m, t) for m, targets in graph.items() for t in targets if layer(t) > layer(m) and (m, t) not in UPWARD_ALLOWED
    )


def test_imports_run_down_the_stages():
    modules = package_modules()
    graph = {m: imports_of(m, p, modules) for m, p in modules.items()}
    for stage in STAGES:  # every stage is a package of its own, and says what it is
        init = os.path.join(ROOT, stage, "__init__.py")
        assert os.path.exists(init), stage
        doc = ast.get_docstring(ast.parse(open(init).read())) or ""
        assert "Entry point" in doc and "Reads" in doc, (stage, doc[:80])
    assert upward_imports(graph) == [], "a module imports a stage above its own: " + str(upward_imports(graph))
    rooms: dict[str, set[str]] = {}  # a top-level module or package is a room: no loop between rooms either
    for m, targets in graph.items():
        rooms.setdefault(m.split(".")[1] if "." in m else "__init__", set()).update(
            t.split(".")[1] for t in targets if "." in t and t.split(".")[1] != (m.split(".") + [""])[1]
        )
    assert cycles(rooms) == [], "loops between packages: " + str(cycles(rooms))
    assert ("flowclip_cache.paper.runner", "flowclip_cache.cli") in {(m, t) for m in graph for t in graph[m]}


def test_the_stage_rule_finds_an_upward_import():
    """The check itself, on a planted graph: the store importing scoring, training importing
    scoring and extraction importing training are each found; downward arrows, the shared
    ground and the surface are not."""
    graph = {
        "flowclip_cache.store.core": {"flowclip_cache.scoring.score", "flowclip_cache.hashing"},
        "flowclip_cache.training.loop": {"flowclip_cache.scoring.metrics", "flowclip_cache.store.banks"},
        "flowclip_cache.extraction.extract": {"flowclip_cache.training.ranks", "flowclip_cache.store.core"},
        "flowclip_cache.hashing": set(),
        "flowclip_cache.cli": {"flowclip_cache.paper.plan", "flowclip_cache.studies.study"},
        "flowclip_cache.paper.plan": {"flowclip_cache.studies.study", "flowclip_cache.datasets"},
    }
    assert upward_imports(graph) == [
        ("flowclip_cache.extraction.extract", "flowclip_cache.training.ranks"),
        ("flowclip_cache.store.core", "flowclip_cache.scoring.score"),
        ("flowclip_cache.training.loop", "flowclip_cache.scoring.metrics"),
    ]
    assert upward_imports({"flowclip_cache.datasets": {"flowclip_cache.store.core"}}) == [
        ("flowclip_cache.datasets", "flowclip_cache.store.core")
    ]  # the shared ground imports no stage


def test_the_command_line_starts_without_torch():
    """`flowclip --help`, any command's --help and the one-line errors before work starts
    need no torch (1.7 s of CPU): it is imported when a command runs."""
    import subprocess
    import sys

    code = (
        "import sys; from click.testing import CliRunner; from flowclip_cache.cli import main; "
        "r = CliRunner().invoke(main, ['--help']); r2 = CliRunner().invoke(main, ['run', '--help']); "
        "assert r.exit_code == 0 and r2.exit_code == 0; print('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
