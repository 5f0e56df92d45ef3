"""The package's dependency rules (DESIGN 1), checked on the imports every module really makes.

Every module under `kvclaims/` is parsed (ast, so function-level imports count as much as
module-level ones); `from P import name` depends on module `P.name` when that is a module, else
on `P`. The rules:

- each area (a subpackage, or a top-level module) imports only the kvclaims areas `ALLOWED`
  lists for it: `spec` nothing, `statemachine` only `spec`, and `refinement` is imported only
  by `lab`, `report`, `testing` and `cli`;
- a third-party package in `EXTERNAL` is imported only by the areas listed for it (vLLM by the
  binding and the lab that drives it, z3 by the solver);
- no import cycle between modules. Imports under `if TYPE_CHECKING:` are type references, not
  executed: they count for the area rules, not for cycles.

`violations` is a pure function of a module map, so the planted-violation tests below run it on
synthetic maps and show that each rule fires.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

import kvclaims

ROOT = "kvclaims"

SEMANTICS = frozenset({"spec", "statemachine"})
ALLOWED: dict[str, frozenset[str]] = {
    "spec": frozenset(),
    "bundled": frozenset(),  # package data: paths only
    "userdirs": frozenset(),  # the user's data and cache directories: paths only
    # the oracle's comparison harness drives the checker and the MicroRuntime; its interpreter
    # imports nothing of kvclaims (test_the_oracle_shares_no_deciding_code_with_the_checker)
    "oracle": frozenset({"refinement", "microruntime"}),
    "statemachine": frozenset({"spec"}),
    "microruntime": SEMANTICS,
    "solver": SEMANTICS | {"userdirs"},
    "refinement": SEMANTICS,
    "vllm_binding": SEMANTICS,
    "lab": SEMANTICS | {"microruntime", "refinement", "vllm_binding", "userdirs"},
    "report": SEMANTICS | {"microruntime", "refinement", "lab", "solver"},
    "testing": SEMANTICS | {"microruntime", "refinement", "lab"},
    "cli": SEMANTICS
    | {"microruntime", "solver", "refinement", "vllm_binding", "lab", "report", "bundled", "userdirs"},
    "__main__": frozenset({"cli"}),
    "__init__": frozenset(),  # its public names are imported lazily, by name, via importlib
}
"""Area -> the other kvclaims areas it may import. An area may always import itself, and any
area `kvclaims` itself (whose `__init__` imports nothing at import time)."""

EXTERNAL: dict[str, frozenset[str]] = {
    "vllm": frozenset({"vllm_binding", "lab"}),
    "z3": frozenset({"solver"}),
    "ray": frozenset({"refinement"}),
}
"""Third-party top-level package -> the only areas that may import it."""

PENDING_CYCLES: frozenset[frozenset[str]] = frozenset()
"""Cycles known at the time of writing whose modules another change (issue 13's claim ledger)
rewrites; a test fails as soon as one is gone, so the entry is deleted then."""


@dataclass
class Module:
    """What one module imports: `runtime` (executed) and `typing_only` (under TYPE_CHECKING)."""

    runtime: set[str] = field(default_factory=set)
    typing_only: set[str] = field(default_factory=set)


def area(module: str) -> str:
    """`kvclaims.lab.repeat` -> `lab`; `kvclaims.testing` -> `testing`; `kvclaims` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.AST, package: list[str], typing_only: bool = False
) -> Iterator[tuple[str, bool, bool]]:
    """(dotted name, under TYPE_CHECKING, is `P.name` of a `from P import name`) for every
    import in `tree`, at any depth."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), package, True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), package, typing_only)
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, typing_only, False) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base, typing_only, False
            yield from ((f"{base}.{alias.name}", typing_only, True) for alias in node.names)
        yield from _imports(node, package, typing_only)


def scan(root: Path) -> dict[str, Module]:
    """Every module under `root` (the `kvclaims` directory) and its imports, resolved to module
    names where they name a kvclaims module (`from P import f` -> `P` when `P.f` is no module)."""
    sources = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        sources[name] = (path, parts[:-1])
    modules: dict[str, Module] = {}
    for name, (path, package) in sources.items():
        module = Module()
        for imported, typing_only, member in _imports(ast.parse(path.read_text(encoding="utf-8")), package):
            if member and imported not in sources and imported.rpartition(".")[0] in sources:
                continue  # `from P import f`, f a function or class of module P: P was yielded too
            (module.typing_only if typing_only else module.runtime).add(imported)
        module.typing_only -= module.runtime
        modules[name] = module
    return modules


def _cycles(modules: Mapping[str, Module]) -> set[frozenset[str]]:
    """Import cycles between modules, over executed imports (function-level included)."""
    graph = nx.DiGraph()
    graph.add_edges_from(
        (name, imported)
        for name, module in modules.items()
        for imported in module.runtime
        if imported in modules and imported != name
    )
    return {frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1}


def violations(modules: Mapping[str, Module]) -> list[str]:
    """Every broken rule in a module map, one line each (empty: the map obeys DESIGN 1)."""
    found: list[str] = []
    for name, module in sorted(modules.items()):
        mine = area(name)
        for imported in sorted(module.runtime | module.typing_only):
            top = imported.split(".")[0]
            if top == ROOT:
                theirs = area(imported)
                if theirs not in (mine, "__init__") and theirs not in ALLOWED.get(mine, frozenset()):
                    found.append(f"{name} -> {imported}: {mine} may not import {theirs}")
            elif top in EXTERNAL and mine not in EXTERNAL[top]:
                found.append(f"{name} -> {imported}: only {sorted(EXTERNAL[top])} may import {top}")
    for cycle in sorted(_cycles(modules) - PENDING_CYCLES, key=sorted):
        found.append(f"import cycle: {' <-> '.join(sorted(cycle))}")
    return found


PACKAGE = scan(Path(kvclaims.__file__).parent)


def test_every_area_is_known_to_the_rules() -> None:
    assert {area(name) for name in PACKAGE} <= set(ALLOWED)


def test_the_package_obeys_the_dependency_rules() -> None:
    assert violations(PACKAGE) == []


def test_the_oracle_shares_no_deciding_code_with_the_checker() -> None:
    """The oracle that judges the checker decides alone: its interpreter and the modules it
    decides with import no kvclaims module but each other (not even the spec's event models),
    at module or function level."""
    deciding = {f"kvclaims.oracle.{name}" for name in ("interpreter", "core", "traffic", "format", "state")}
    for name in deciding:
        imported = PACKAGE[name]
        assert {i for i in imported.runtime | imported.typing_only if i.split(".")[0] == ROOT} <= deciding


def test_the_rules_say_what_design_1_says() -> None:
    assert ALLOWED["spec"] == frozenset()
    assert ALLOWED["statemachine"] == {"spec"}
    assert {a for a, deps in ALLOWED.items() if "refinement" in deps} == {
        "lab",
        "report",
        "testing",
        "cli",
        "oracle",
    }
    assert {a for a, deps in ALLOWED.items() if "lab" in deps} == {"report", "testing", "cli"}


def test_each_pending_cycle_still_exists() -> None:
    """When the change that removes a pending cycle lands, delete it from PENDING_CYCLES."""
    assert PENDING_CYCLES <= _cycles(PACKAGE)


def test_function_level_and_relative_imports_are_seen(tmp_path: Path) -> None:
    root = tmp_path / ROOT
    (root / "spec").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "spec" / "__init__.py").write_text("")
    (root / "spec" / "a.py").write_text("def f():\n    from . import b\n    return b\n")
    (root / "spec" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvclaims.lab import x\n"
        "class C:\n    def m(self):\n        from .a import f\n"
    )
    modules = scan(root)
    assert modules["kvclaims.spec.a"].runtime == {"kvclaims.spec", "kvclaims.spec.b"}
    assert modules["kvclaims.spec.b"].runtime == {"typing", "typing.TYPE_CHECKING", "kvclaims.spec.a"}
    assert modules["kvclaims.spec.b"].typing_only == {"kvclaims.lab", "kvclaims.lab.x"}
    found = violations(modules)
    assert "import cycle: kvclaims.spec.a <-> kvclaims.spec.b" in found
    assert "kvclaims.spec.b -> kvclaims.lab: spec may not import lab" in found


def _map(**imports: set[str]) -> dict[str, Module]:
    return {name.replace("__", "."): Module(runtime=set(names)) for name, names in imports.items()}


def test_each_planted_violation_is_found() -> None:
    planted = _map(
        kvclaims__statemachine__x={"kvclaims.microruntime.runtime"},
        kvclaims__microruntime__runtime={"kvclaims.refinement.checker"},
        kvclaims__refinement__checker={"kvclaims.spec.trace"},
        kvclaims__spec__trace={"kvclaims.statemachine.lifecycle", "z3"},
        kvclaims__statemachine__lifecycle={"kvclaims.statemachine.x"},
        kvclaims__report__r={"vllm.config"},
        kvclaims__lab__l={"vllm", "kvclaims.refinement.checker"},
    )
    assert violations(planted) == [
        "kvclaims.microruntime.runtime -> kvclaims.refinement.checker: "
        "microruntime may not import refinement",
        "kvclaims.report.r -> vllm.config: only ['lab', 'vllm_binding'] may import vllm",
        "kvclaims.spec.trace -> kvclaims.statemachine.lifecycle: spec may not import statemachine",
        "kvclaims.spec.trace -> z3: only ['solver'] may import z3",
        "kvclaims.statemachine.x -> kvclaims.microruntime.runtime: statemachine may not import microruntime",
        "import cycle: kvclaims.microruntime.runtime <-> kvclaims.refinement.checker <-> "
        "kvclaims.spec.trace <-> kvclaims.statemachine.lifecycle <-> kvclaims.statemachine.x",
    ]


def test_a_clean_map_has_no_violation() -> None:
    clean = _map(
        kvclaims__statemachine__lifecycle={"kvclaims.spec.trace"},
        kvclaims__spec__trace=set(),
        kvclaims__lab__l={"vllm", "kvclaims.refinement.checker", "kvclaims.statemachine.lifecycle"},
        kvclaims__refinement__checker={"kvclaims.statemachine.lifecycle"},
        kvclaims__solver__s={"z3"},
    )
    assert violations(clean) == []
