"""The code's layout, as the imports show it: no cycles, no asset module importing another, models never
importing training, no module over 300 lines. Read from the source (ast), nothing imported."""

from __future__ import annotations

import ast
import pathlib

from batch_assets.storage import REPO_ROOT

PACKAGE = REPO_ROOT / "batch_assets"
MAX_LINES = 300


def _modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: pathlib.Path, modules: dict[str, pathlib.Path], top_level_only: bool) -> set[str]:
    """The project modules `path` imports (`from batch_assets.x import name` counts batch_assets.x.name when that
    is a module); with `top_level_only`, only imports run when the module loads (not those inside functions)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("batch_assets"):
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
            found |= {node.module} if node.module in modules else set()
    return found


def test_the_modules_import_each_other_without_a_cycle():
    modules = _modules()
    graph = {name: _imports(path, modules, top_level_only=True) - {name} for name, path in modules.items()}
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
        imported = _imports(path, modules, top_level_only=False)
        if name.endswith(".assets"):
            assert not [m for m in imported if m.endswith(".assets")], f"{name} imports another asset module"
        if name.startswith("batch_assets.models"):
            assert not [m for m in imported if m.startswith("batch_assets.training")], f"{name} imports training code"


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(REPO_ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules by what they do: {long}"
