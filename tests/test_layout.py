"""The code's layout, as the imports show it: no cycle between any two modules (imports inside functions and
under TYPE_CHECKING count too), no asset module importing another, models never importing training, no module
over 300 lines, at most 8 modules loose under `batch_assets/` (the rest live in packages named for what they
hold). Read from the source (ast), nothing imported."""

from __future__ import annotations

import ast
import pathlib

from batch_assets.storage.resource import REPO_ROOT

PACKAGE = REPO_ROOT / "batch_assets"
MAX_LINES = 300
MAX_LOOSE_MODULES = 8


def _modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The project modules `path` imports anywhere in it (`from batch_assets.x import name` counts
    batch_assets.x.name when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("batch_assets"):
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
            found |= {node.module} if node.module in modules else set()
    return found


def test_the_modules_import_each_other_without_a_cycle():
    """A cycle through an import inside a function or under TYPE_CHECKING is still two modules that need each
    other: it fails here too."""
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        assert name not in trail, "import cycle: " + " -> ".join([*trail[trail.index(name):], name])
        if name in done:
            return
        for imported in sorted(graph[name]):
            if not name.startswith(imported + "."):  # a package's own __init__ is not a cycle
                visit(imported, [*trail, name])
        done.add(name)

    for name in graph:
        visit(name, [])


def test_no_asset_module_imports_another_and_models_never_import_training():
    modules = _modules()
    for name, path in modules.items():
        imported = _imports(path, modules)
        if name.endswith(".assets"):
            assert not [m for m in imported if m.endswith(".assets")], f"{name} imports another asset module"
        if name.startswith("batch_assets.models"):
            assert not [m for m in imported if m.startswith("batch_assets.training")], f"{name} imports training code"


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(REPO_ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules by what they do: {long}"


def test_at_most_8_modules_are_loose_under_the_package():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, f"put these in a package named for what they hold: {loose}"
