"""The README's table of environment variables says what the code reads: every variable a module reads (through
`settings.py`'s parsers, `os.environ` or a table of them such as `definitions.STORAGE_VARIABLES`) or the Makefile
exports has a row, every variable in the table is read (but those of other tools, `NOT_OURS`), and each switch's
row gives the registry's variable and default. Read from the source (ast), the Makefile and the README."""

from __future__ import annotations

import ast
import re

from batch_assets.storage import REPO_ROOT
from batch_assets.switches import SWITCHES

PARSERS = {"env_int", "env_bool", "env_fraction", "env_str", "env_or", "env_day", "env_choice"}
# read by the libraries and tools we run, not by our code: documented in the same table
NOT_OURS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_HUB_OFFLINE", "DAGSTER_PG_PASSWORD", "VENV", "PYTHON",
            "PARTITION", "DEV_PORT"}


def _read_by_code() -> set[str]:
    names = {s.env_var for s in SWITCHES}
    for path in (REPO_ROOT / "batch_assets").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                environ = isinstance(func, ast.Attribute) and ast.unparse(func.value) in ("os.environ", "environ")
                if called in PARSERS or (environ and called in ("get", "setdefault")):
                    names.add(node.args[0].value)
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_VARIABLES") for t in node.targets):
                names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}  # a table of them
            if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and isinstance(node.slice, ast.Constant):
                names.add(node.slice.value)
    names |= set(re.findall(r"^export (\w+)", (REPO_ROOT / "Makefile").read_text(), re.M))  # set for every make target
    names |= {"HF_TOKEN", "HF_HOME"}  # read by huggingface_hub on our behalf (the production models' download and cache)
    return {n for n in names if isinstance(n, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", n)}


def _readme_rows() -> dict[str, str]:
    """Each variable in the README's configuration table -> its default cell."""
    text = (REPO_ROOT / "README.md").read_text()
    table = text.split("### Configuration: every environment variable", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_every_variable_the_code_reads_has_a_row_and_every_row_is_read():
    read, rows = _read_by_code(), _readme_rows()
    assert read - set(rows) == set(), "README.md's configuration table lacks these variables the code reads"
    assert set(rows) - read - NOT_OURS == set(), "README.md's configuration table lists variables no code reads"


def test_each_switch_row_gives_the_registry_default():
    rows = _readme_rows()
    for switch in SWITCHES:
        assert rows[switch.env_var] == str(switch.default).lower(), switch.env_var
