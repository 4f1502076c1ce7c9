"""The README's configuration tables say what the code reads.

- Our table is made from `Settings` and the switches' registry: the README holds `python -m batch_assets.settings`'s
  output verbatim.
- No module but `settings.py` parses a variable: every read of ours is a `Settings` field.
- The second table (the variables of the libraries and tools we run) lists every variable our code touches outside
  `Settings` (`os.environ`, read from the source with ast) and every one the Makefile exports, and nothing else but
  the tools' own (`NOT_OURS`).
"""

from __future__ import annotations

import ast
import re

from batch_assets.settings import readme_table, variable_names
from batch_assets.storage.resource import REPO_ROOT

PARSERS = {"env_int", "env_bool", "env_fraction", "env_str", "env_day", "env_choice", "env_path", "env_routing"}
# read by the libraries and tools we run, not by our code: documented in the second table
NOT_OURS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_HOME", "NEMO_CACHE_DIR", "HF_HUB_OFFLINE",
            "DAGSTER_PG_PASSWORD", "VENV", "PYTHON", "PARTITION", "DEV_PORT"}
SECTION = "### Configuration: every environment variable"


def _modules():
    for path in sorted((REPO_ROOT / "batch_assets").rglob("*.py")):
        yield path.relative_to(REPO_ROOT).as_posix(), ast.parse(path.read_text())


def _environ_names(tree: ast.AST) -> set[str]:
    """Constant names this module reads or sets through `os.environ` (get, setdefault, [...]) or `os.getenv`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.environ.setdefault", "os.getenv"):
                names.add(node.args[0].value)
        if (isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ"
                and isinstance(node.slice, ast.Constant)):
            names.add(node.slice.value)
    return names


def _tables() -> tuple[str, dict[str, str]]:
    """The configuration section's text, and each variable in its tables -> its default cell."""
    section = (REPO_ROOT / "README.md").read_text().split(SECTION, 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
                rows[name] = cells[1]
    return section, rows


def test_the_readme_holds_the_table_made_from_the_settings():
    section, _ = _tables()
    assert readme_table() in section, "README.md: paste the table printed by `python -m batch_assets.settings`"


def test_only_settings_py_parses_a_variable():
    for module, tree in _modules():
        if module == "batch_assets/settings.py":
            continue
        called = {ast.unparse(n.func).split(".")[-1] for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert called & PARSERS == set(), f"{module} parses a variable itself: make it a field of Settings"


def test_the_tools_table_lists_every_other_variable_we_touch_and_nothing_else():
    ours = variable_names()
    touched = set().union(*(_environ_names(tree) for _, tree in _modules()))
    # set for every make target
    touched |= set(re.findall(r"^export (\w+)", (REPO_ROOT / "Makefile").read_text(), re.M))
    section, rows = _tables()
    tools = {name for name in rows if f"`{name}`" in section.split(readme_table(), 1)[1]}
    assert touched - ours - tools == set(), "README.md's second configuration table lacks these variables"
    assert tools - touched - NOT_OURS == set(), "README.md's second configuration table lists variables nothing sets"
    assert ours & tools == set(), "a Settings variable belongs in the table made from the settings, not the tools'"
