"""The code's layout, as the imports show it: no cycle between any two modules (imports inside functions and
under TYPE_CHECKING count too), no asset module importing another, models never importing training, no module
over 300 lines, at most 8 modules loose under `batch_assets/` and under `gpu/` (the rest live in packages named for
what they hold); each room of `gpu/` imports only the rooms its docstring's `May import:` line names, and those
lines never go round; a flight's models, followed as data (`models_flow.py`), enter a file they already left at
most 12 times. Read from the source (ast), nothing imported."""

from __future__ import annotations

import ast
import pathlib
import re

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


GPU = PACKAGE / "gpu"
MAY_IMPORT = re.compile(r"^May import: (.+?)\.?$", re.M)


def _gpu_rooms() -> dict[str, set[str]]:
    """Each package under gpu/ -> the gpu packages its docstring says it may import (its own sub-packages go
    without saying)."""
    rooms = {}
    for init in sorted(GPU.rglob("__init__.py")):
        if init.parent == GPU:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        found = MAY_IMPORT.search(doc)
        assert found, f"{init.relative_to(REPO_ROOT)}: say what the room holds, then 'May import: ...'"
        listed = found.group(1)
        name = ".".join(init.parent.relative_to(REPO_ROOT).parts)
        rooms[name] = set() if listed.startswith("nothing") else {f"batch_assets.{x.strip()}"
                                                                   for x in listed.split(",")}
        for module in init.parent.glob("*.py"):  # every module of the room is named where the room is described
            assert module.name == "__init__.py" or f"`{module.name}`" in doc, f"{name}'s docstring: {module.name}?"
        for sub in (p for p in init.parent.iterdir() if (p / "__init__.py").exists()):
            assert f"`{sub.name}/`" in doc, f"{name}'s docstring: {sub.name}/?"
    return rooms


def _room(module: str, rooms: dict[str, set[str]]) -> str | None:
    inside = [room for room in rooms if module == room or module.startswith(room + ".")]
    return max(inside, key=len) if inside else None


def _within(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_gpu_rooms_import_only_what_their_docstrings_name_and_the_map_names_every_room():
    rooms, modules = _gpu_rooms(), _modules()
    loose = sorted(p.name for p in GPU.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, f"put these in a room of gpu/ named for what they hold: {loose}"
    for name, path in modules.items():
        room = _room(name, rooms)
        if room is None:
            continue
        for imported in _imports(path, modules):
            if not _within(imported, "batch_assets.gpu") or _within(imported, room):
                continue
            allowed = [a for a in rooms[room] if _within(imported, a)]
            assert allowed, f"{name} imports {imported}: not in {room}'s 'May import' ({sorted(rooms[room])})"
    declared = {room: {r for r in rooms if any(_within(r, a) for a in allowed)} for room, allowed in rooms.items()}

    def visit(room: str, trail: list[str]) -> None:
        assert room not in trail, "the rooms' 'May import' lines go round: " + " -> ".join([*trail, room])
        for other in declared[room]:
            visit(other, [*trail, room])

    for room in declared:
        visit(room, [])
    the_map = ast.get_docstring(ast.parse((GPU / "__init__.py").read_text()))
    for room in rooms:
        assert f"{room.rsplit('.', 1)[1]}/" in the_map, f"gpu/__init__.py's map does not name {room}"


def test_a_flights_models_come_back_to_a_file_already_left_at_most_12_times():
    """Followed as data (`tests/models_flow.py`), `section.flight.device_work`'s models reach every stage's room and
    enter a file they already left at most 12 times (28 before gpu/ was split into rooms, issue 49)."""
    from .models_flow import follow

    flow = follow()
    print(f"stays {len(flow.stays)}, files {len(flow.files)}, returns {flow.returns}: {flow.files.most_common(4)}")
    for room in ("gpu/diarization/vad.py", "gpu/diarization/embeddings/", "gpu/section/routing.py", "gpu/asr/"):
        assert any(room in file for file in flow.stays), f"the flow no longer reaches {room}: it measures nothing"
    assert flow.returns <= 12, "\n".join(flow.stays)
