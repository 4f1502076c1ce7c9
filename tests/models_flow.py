"""The files a value passes through, followed as data from call to call: how often a reader following a flight's
models through the GPU section must come back to a file already left. Static (`ast` only, nothing is imported).

The definition (it gives issue 49's 43 stays in 15 files, 28 returns, on the code before the issue, c. 06b4321):
- Tracked: the start function's parameter (`section.flight.device_work`'s `models`), an attribute or subscript of a
  tracked value (`models.diarization`), a local name bound to one (`pipeline = models.diarization`, element-wise in
  tuple assignments, `with ... as`); rebinding a name to anything else untracks it; a call's result is not tracked.
- Followed: a call one of whose arguments reads a tracked value anywhere in it (`models.device`, `f(models)`), to a
  function or class (its own `__init__`) of the package, named through the module's definitions or imports
  (anywhere in it, TYPE_CHECKING too); not a method called on a value (the callee depends on the value's type), not
  `super()`, nothing outside the package. The callee is walked with the parameters those arguments bind tracked:
  its body in evaluation order (arguments before the call, a loop's iterable before its body), each call site
  followed once.
- Visits: the file of each function as it is entered, in order. Stays: runs of one file among the visits; returns:
  stays minus distinct files (entering a file already left); a file's entries: its stays.

`python tests/models_flow.py` prints the stays, the counts and the entries per file; `tests/test_layout.py` holds
the returns to the issue's target.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import itertools
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "batch_assets"
START = "batch_assets.gpu.section.flight:device_work"
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
LOOPS = (ast.For, ast.AsyncFor, ast.comprehension)


@dataclasses.dataclass
class Flow:
    stays: list[str]  # each stay's file (path from the package's parent), in order

    @property
    def files(self) -> Counter[str]:  # entries (stays) per file
        return Counter(self.stays)

    @property
    def returns(self) -> int:
        return len(self.stays) - len(self.files)


class Module:
    def __init__(self, root: Path, path: Path):
        self.rel, parts = path.relative_to(root.parent).as_posix(), path.relative_to(root.parent).with_suffix("").parts
        self.name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(), str(path))
        self.defs = {n.name: n for n in tree.body if isinstance(n, (*FUNCS, ast.ClassDef))}
        self.aliases: dict[str, str] = {}  # local name -> qualified name, from every import in the module
        package = self.name.split(".")[: None if parts[-1] == "__init__" else -1]
        for node in ast.walk(tree):
            for a in node.names if isinstance(node, ast.Import) else []:  # `import a.b` binds `a`
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            for a in node.names if isinstance(node, ast.ImportFrom) else []:
                base = package[: len(package) - node.level + 1] if node.level else []
                self.aliases[a.asname or a.name] = ".".join([*base, *([node.module] if node.module else []), a.name])


class Package:
    def __init__(self, root: Path):
        self.modules = {m.name: m for m in (Module(root, p) for p in sorted(root.rglob("*.py")))}

    def lookup(self, qual: str, depth: int = 0):
        """A qualified name -> (module, function or class's own `__init__`); None outside the package."""
        parts = qual.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if (mod := self.modules.get(".".join(parts[:i]))) is None or depth > 20:
                continue
            head, rest = parts[i], parts[i + 1 :]
            if (node := mod.defs.get(head)) is None:  # re-exported name, or a submodule
                return self.lookup(".".join([mod.aliases[head], *rest]), depth + 1) if head in mod.aliases else None
            if rest:
                return None
            if isinstance(node, ast.ClassDef):  # a constructor: the class's own __init__, if any
                init = next((n for n in node.body if isinstance(n, FUNCS) and n.name == "__init__"), None)
                return (mod, init, True) if init else None
            return mod, node, False
        return None

    def resolve(self, mod: Module, expr):
        names = []
        while isinstance(expr, ast.Attribute):
            names, expr = [expr.attr, *names], expr.value
        head = expr.id if isinstance(expr, ast.Name) else None
        qual = f"{mod.name}.{head}" if head in mod.defs else mod.aliases.get(head)
        return self.lookup(".".join([qual, *names])) if qual else None


def events(node):
    """The calls and bindings under `node` (a function's statements), in evaluation order; nested defs skipped."""
    if isinstance(node, LOOPS):
        yield from events(node.iter)
        yield node
        children = node.ifs if isinstance(node, ast.comprehension) else [*node.body, *node.orelse]
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        children = [*node.generators, *([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt])]
    else:
        children = [] if isinstance(node, (*FUNCS, ast.ClassDef)) else ast.iter_child_nodes(node)
    for child in children:
        yield from events(child)
    if isinstance(node, (ast.Call, ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.withitem)):
        yield node


def follow(start: str = START, param: str = "models", root: Path = PACKAGE) -> Flow:
    pkg = Package(Path(root))
    visits: list[str] = []
    followed: set[tuple[str, int, int]] = set()  # call sites

    def walk(mod: Module, fn, tracked: set[str]) -> None:
        visits.append(mod.rel)

        def reads(expr) -> bool:  # whether an expression reads a tracked value anywhere in it
            return any(isinstance(n, ast.Name) and n.id in tracked for n in ast.walk(expr))

        def is_tracked(expr) -> bool:  # the value itself, or an attribute or subscript of it
            while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
                expr = expr.value
            return isinstance(expr, ast.Name) and expr.id in tracked

        def bind(target, value) -> None:  # the names a target binds (not `x` of `x.attr = ...`)
            if isinstance(target, (ast.Tuple, ast.List)):  # element-wise from a tuple of the same length
                same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                for i, t in enumerate(target.elts):
                    bind(t, value.elts[i] if same else None)
                return
            target = target.value if isinstance(target, ast.Starred) else target
            if isinstance(target, ast.Name):
                (tracked.add if value is not None and is_tracked(value) else tracked.discard)(target.id)

        for node in (event for statement in fn.body for event in events(statement)):
            if isinstance(node, ast.Call):
                call(mod, node, reads)
            elif isinstance(node, LOOPS):
                bind(node.target, None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, node.context_expr)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    bind(target, node.value)

    def call(mod: Module, node: ast.Call, reads) -> None:
        target = pkg.resolve(mod, node.func)
        if target is None:  # outside the package, or a class without its own __init__
            return
        callee_mod, callee, constructor = target
        params = [a.arg for a in callee.args.posonlyargs + callee.args.args][1 if constructor else 0 :]
        keywords = {a.arg for a in callee.args.posonlyargs + callee.args.args + callee.args.kwonlyargs}
        new = {params[i] if i < len(params) else callee.args.vararg.arg
               for i, arg in enumerate(node.args)
               if reads(arg) and (i < len(params) or callee.args.vararg) and not isinstance(arg, ast.Starred)}
        new |= {kw.arg for kw in node.keywords if kw.arg in keywords and reads(kw.value)}
        if not new or (site := (mod.name, node.lineno, node.col_offset)) in followed:
            return
        followed.add(site)
        walk(callee_mod, callee, new)

    mod_name, fn_name = start.split(":")
    mod = pkg.modules[mod_name]
    walk(mod, mod.defs[fn_name], {param})
    return Flow([file for file, _ in itertools.groupby(visits)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=PACKAGE, help="the package's folder (default: %(default)s)")
    parser.add_argument("--start", default=START, help="module:function (default: %(default)s)")
    parser.add_argument("--param", default="models", help="the parameter followed (default: %(default)s)")
    result = follow(**vars(parser.parse_args()))
    print("\n".join(f"{number:3d} {file}" for number, file in enumerate(result.stays, 1)))
    print(f"stays {len(result.stays)}, files {len(result.files)}, returns {result.returns}; entries per file:")
    print("\n".join(f"{entries:5d} {file}" for file, entries in result.files.most_common()))
