"""The package's shape: no import cycles (imports inside functions included), the layers
contract of pyproject.toml kept, no underscored name used across modules, modules small.

`make lint` runs the same contract with import-linter's own command; this test keeps it in
`make test` too, with the cycles that a layers contract alone does not see (inside a layer).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "analyzer"
MAX_MODULE_LINES = 500


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("analyzer", cache_dir=None)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles(graph):
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    g = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        g.add_module(name)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.a")
    g.add_import(importer="p.c", imported="p.a")
    assert _cycles(g) == [["p.a", "p.b"]]


def test_layers_contract_is_kept():
    command = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(command), "--no-cache"], cwd=PACKAGE.parent, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(PACKAGE.parent)}: {node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("analyzer")
        for alias in node.names
        if alias.name.startswith("_")
    ]


def test_no_private_name_crosses_modules():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _private_imports(path)]
    assert found == []


def test_modules_are_small():
    sizes = {
        str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


MAX_FUNCTION_LINES = 100  # a function longer than this is several steps: give them names


def test_functions_are_short():
    """(issue 34 item 6: plan() was 175 lines with 12 parameters, run_sweeps 97)"""
    long = {
        f"{p.relative_to(PACKAGE.parent)}:{node.name}": node.end_lineno - node.lineno + 1
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_every_vllm_reference_module_is_held_off_the_fast_paths():
    """The contract names the reference's modules one by one: a new one must join it."""
    import tomllib

    contracts = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]
    [held] = [
        c["source_modules"]
        for c in contracts["importlinter"]["contracts"]
        if c.get("forbidden_modules") == ["analyzer.sim.vllm.compiled"]
    ]
    modules = {f"analyzer.sim.vllm.{p.stem}" for p in (PACKAGE / "sim" / "vllm").glob("*.py")}
    assert set(held) == modules - {"analyzer.sim.vllm.__init__"}
