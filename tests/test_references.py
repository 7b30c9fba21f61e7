"""Every reference to the code resolves: the dotted module paths (`analyzer.store.db`), the file
paths (`sim/vllm/reference.py`, `tests/golden/oracle/`) and the `Class.attr` /
`module.function` names and the `docs/page.md#anchor` links cited in the docstrings and
comments of analyzer/, tools/, bench/ and tests/ and inside the backticks of README.md and
docs/*.md; and no citation of the product contract ("SPEC n", a file outside the
repository: its definitions are docs/definitions.md) and no path of a developer's machine
remains in the tree.

The code is read, never imported (tools/oracle/ imports vLLM and SGLang): a module's names
are its top-level definitions, assignments and imports; a class's its body's and the
`self.x` its methods assign, then its bases' in the repository. A dotted name that starts
with a module of the repository must resolve whole; `X.y` is checked where X names a class
or module of the repository, so `np.int32` or `e.g.` are not references. A failure names
the file, the line and the reference (issue 48 item 7: 33 references to moved modules; this
test found 37).
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tests.test_docs import _anchors

ROOT = Path(__file__).resolve().parents[1]
SELF = "tests/test_references.py"  # its examples of stale references are on purpose
# Whose docstrings and comments cite, and what a reference may name.
TREE_DIRS = CODE_DIRS = ("analyzer", "tools", "bench", "tests")
SOURCE_SUFFIXES = (".py", ".c", ".h", ".sql")
# Words after a dot that make a file name, not an attribute (`config.json`, `README.md`).
FILE_EXTENSIONS = frozenset(
    "py c h so sql json jsonl md txt csv parquet gz zst yaml yml toml html sh duckdb cfg ini "
    "arrow log tmp whl pyc js png svg pdf rs go cpp cu".split()
)

# Names that do not resolve in this repository, on purpose: why -> the names.
ALLOWED_BY_REASON = {
    "vLLM's own code (the oracle's and the replay's sources)": {
        "BlockPool.cached_block_hash_to_block",
        "MambaManager.cache_blocks",
        "vllm._C",
    },
    "SGLang's own code (the sglang engine's and router's sources)": {
        "allocation.py",
        "prefill_budget.py",
        "registry.py",
        "request_logger.py",
        "common.free_swa_out_of_window_slots",
        "UnifiedRadixCache.match_prefix",
        "sglang.srt.configs",
        "tree.get_smallest_tenant",
    },
    "other projects' files, cited as sources": {
        "sim/latency/roofline.go",  # inference-sim (BLIS), whose roofline step_time follows
        "tools/server/server-context.cpp",  # llama.cpp's server
        "mamba_cache_manager.py",  # TensorRT-LLM's
        "dynamo.replay.run_trace_replay",  # NVIDIA Dynamo's replay, bench/dynamo_replay.py
        "file.py",  # the `[file.py:N]` of a vLLM log line's header
    },
    "the vLLM oracle, beside the checkout (../shared/oracle/), never in the repository": {
        "vllm_oracle.py",
    },
    "a folder the user fills: `make bench-gpu` reads its wheels from $WHEELS": {
        "bench/wheels/",
    },
    "a placeholder of docs/contributing.md's import rule (`from analyzer.x import _y`)": {
        "analyzer.x",
    },
}
ALLOWED = frozenset(name for names in ALLOWED_BY_REASON.values() for name in names)


@dataclass
class Namespace:
    """What a module or a class defines: name -> the dotted path it stands for (an import
    points elsewhere; a definition at home), and a class's bases."""

    names: dict[str, str] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Reference:
    path: str  # relative to the root
    line: int
    text: str  # as cited


# --- The repository's modules and what they define ------------------------------------------


def _tracked(*dirs: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *dirs],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted({p for p in out.splitlines() if (ROOT / p).exists()})


def _module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, str]:
    """Dotted module name -> its file, for every .py under TREE_DIRS; folders too (a
    namespace package such as `tools.oracle`)."""
    modules: dict[str, str] = {}
    for path in _tracked(*TREE_DIRS):
        if path.endswith(".py"):
            modules[_module_name(path)] = path
            for k in range(1, path.count("/")):
                modules.setdefault(".".join(path.split("/")[:k]), "")
    return modules


def _import_targets(node: ast.stmt, module: str, is_package: bool) -> dict[str, str]:
    if isinstance(node, ast.Import):
        return {
            (a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0])
            for a in node.names
        }
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([base] if base else []))
    return {(a.asname or a.name): f"{base}.{a.name}" for a in node.names if a.name != "*"}


def _targets(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for t in target.elts for n in _targets(t)]
    return []


def _self_attributes(func: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return names


def _union(value: ast.expr | None) -> list[str]:
    """The members of a type alias `A | B`, else []."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
        return (_union(value.left) or [ast.unparse(value.left)]) + (
            _union(value.right) or [ast.unparse(value.right)]
        )
    return []


def _lazy_names(value: ast.expr | None) -> dict[str, str]:
    """A table of names a module's `__getattr__` imports on first use (analyzer/__init__.py's
    `_LAZY`: name -> module): each name stands for the module's."""
    if not isinstance(value, ast.Dict):
        return {}
    pairs = [(k, v) for k, v in zip(value.keys, value.values, strict=True) if k is not None]
    constants = [(k, v) for k, v in pairs if isinstance(k, ast.Constant)]
    texts = [(k.value, v.value) for k, v in constants if isinstance(v, ast.Constant)]
    texts = [(k, v) for k, v in texts if isinstance(k, str) and isinstance(v, str)]
    if not texts or len(texts) != len(pairs) or not all(v in _modules() for _, v in texts):
        return {}
    return {k: f"{v}.{k}" for k, v in texts}


def _scope(body: list[ast.stmt], home: str, module: str, is_package: bool, out: dict) -> None:
    """Fill `out` (dotted path -> Namespace) with the names `body` defines under `home`."""
    space = out.setdefault(home, Namespace())
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            space.names[node.name] = f"{home}.{node.name}"
            if home != module:  # a method: what it stores on self belongs to the class
                for name in _self_attributes(node):
                    space.names.setdefault(name, f"{home}.{name}")
        elif isinstance(node, ast.ClassDef):
            space.names[node.name] = f"{home}.{node.name}"
            inner = f"{home}.{node.name}"
            _scope(node.body, inner, module, is_package, out)
            out[inner].bases = [ast.unparse(b) for b in node.bases]
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in (n for t in targets for n in _targets(t)):
                space.names[name] = f"{home}.{name}"
                if _union(node.value):  # `Trace = LoadedTrace | DatasetTrace`: both members'
                    out.setdefault(f"{home}.{name}", Namespace()).bases = _union(node.value)
            space.names.update(_lazy_names(node.value))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            space.names.update(_import_targets(node, module, is_package))
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            inner_bodies = [node.body, getattr(node, "orelse", [])]
            inner_bodies += [h.body for h in getattr(node, "handlers", [])]
            inner_bodies.append(getattr(node, "finalbody", []))
            for inner_body in inner_bodies:
                _scope(inner_body, home, module, is_package, out)


@cache
def _namespaces() -> dict[str, Namespace]:
    """Dotted path of every module and class of the repository -> what it defines."""
    out: dict[str, Namespace] = {}
    for module, path in _modules().items():
        if not path:
            out.setdefault(module, Namespace())
            continue
        tree = ast.parse((ROOT / path).read_text(), filename=path)
        _scope(tree.body, module, module, path.endswith("__init__.py"), out)
    for module in _modules():  # a package's submodules are its names
        parent, _, name = module.rpartition(".")
        if parent:
            out.setdefault(parent, Namespace()).names.setdefault(name, module)
    return out


def _base_paths(path: str, bases: list[str]) -> list[str]:
    """The dotted paths of a class's bases that are in the repository."""
    module = path.rsplit(".", 1)[0]
    while module and module not in _modules():
        module = module.rpartition(".")[0]
    found = []
    for base in bases:
        head, _, rest = base.partition(".")
        target = _namespaces().get(module, Namespace()).names.get(head)
        if target:
            found.append(f"{target}.{rest}" if rest else target)
    return found


@cache
def resolves(dotted: str, _depth: int = 0) -> bool:
    """Whether a dotted path names a module, or a name defined (or imported) in one."""
    if _depth > 8:
        return False
    spaces = _namespaces()
    if dotted in spaces or dotted in _modules():
        return True
    parent, _, name = dotted.rpartition(".")
    if not parent or not resolves(parent, _depth + 1):
        return False
    space = spaces.get(parent)
    if space is None:  # an imported name or an attribute: follow what it stands for
        target = _alias(parent)
        return target is not None and target != parent and resolves(f"{target}.{name}", _depth + 1)
    if name in space.names:
        return True
    return any(resolves(f"{base}.{name}", _depth + 1) for base in _base_paths(parent, space.bases))


def _alias(dotted: str) -> str | None:
    parent, _, name = dotted.rpartition(".")
    space = _namespaces().get(parent)
    if space is None:
        target = _alias(parent) if "." in parent else None
        return f"{target}.{name}" if target else None
    target = space.names.get(name)
    return target if target and target != dotted else None


# --- What the docstrings and the docs cite ---------------------------------------------------

DOTTED = re.compile(r"(?<![\w./-])((?:analyzer|tools|bench|tests)(?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(r"(?<![\w./~$:-])((?:[\w.*-]+/)+[\w.*-]*|[\w-]+\.(?:py|c|h|sql))(?![\w/<{])")
NAME = re.compile(r"(?<![\w./$-])([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)(?![\w/-])")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
ANCHOR = re.compile(r"(?<![\w/.-])docs/([\w-]+\.md)#([\w-]+)")


def _comments(path: str) -> list[tuple[int, str]]:
    import io
    import tokenize

    source = (ROOT / path).read_text()
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]


def _docstrings(path: str) -> list[tuple[int, str]]:
    """(first line, raw source text) of every docstring of a module."""
    source = (ROOT / path).read_text()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.body and isinstance(node.body[0], ast.Expr):
            value = node.body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                start, end = node.body[0].lineno, node.body[0].end_lineno
                found.append((start, "\n".join(lines[start - 1 : end])))
    return found


def _markdown_spans(path: str) -> list[tuple[int, str]]:
    """(line, text) of every inline code span of a Markdown file, outside fenced blocks."""
    spans, fenced = [], False
    for number, line in enumerate((ROOT / path).read_text().splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            spans.extend((number, m[2]) for m in CODE_SPAN.finditer(line))
    return spans


def _texts() -> list[tuple[str, int, str]]:
    """(file, first line, text) of everything whose references are checked."""
    texts = [
        (path, line, text)
        for path in _tracked(*CODE_DIRS)
        if path.endswith(".py") and path != SELF
        for line, text in _docstrings(path) + _comments(path)
    ]
    for path in ["README.md", *_tracked("docs")]:
        if path.endswith(".md"):
            texts.extend((path, line, text) for line, text in _markdown_spans(path))
    return texts


def _at(path: str, line: int, text: str, start: int, cited: str) -> Reference:
    return Reference(path, line + text.count("\n", 0, start), cited)


def references_in(path: str, line: int, text: str) -> list[tuple[str, Reference]]:
    """(kind, reference) of every reference a text cites: "module" (`analyzer.x.y`), "path"
    (`sim/vllm/reference.py`), "name" (`Class.attr`, `module.function`) or "anchor"
    (`docs/definitions.md#figures`); `line` is the text's first line in `path`."""
    found = []
    for m in DOTTED.finditer(text):
        found.append(("module", _at(path, line, text, m.start(), m[1])))
    for m in PATH.finditer(text):
        cited = m[1].rstrip(".")
        if _is_tree_path(cited, path) and not _line_cited(text, m.end()):
            found.append(("path", _at(path, line, text, m.start(), cited)))
    for m in NAME.finditer(text):
        if _is_name(m, text):
            found.append(("name", _at(path, line, text, m.start(), m[0])))
    for m in ANCHOR.finditer(text):
        found.append(("anchor", _at(path, line, text, m.start(), m[0])))
    return found


def references() -> dict[str, list[Reference]]:
    """Kind -> every reference of that kind the docstrings, comments and docs cite."""
    found: dict[str, list[Reference]] = {"module": [], "path": [], "name": [], "anchor": []}
    for path, line, text in _texts():
        for kind, ref in references_in(path, line, text):
            found[kind].append(ref)
    return found


def _line_cited(text: str, end: int) -> bool:
    """`overrides.py:1341`: another project's file, cited by line (ours are cited by name)."""
    return re.match(r":\d", text[end:]) is not None


def _is_name(m: re.Match, text: str) -> bool:
    """Whether `X.y` is a reference to check: X a class, module or stored table of ours, not
    a file name (`config.json`), a prefix (`C_*`) or a variable of the text's own example
    (`source = request_input(...)`, then `source.connect()`)."""
    head, last = m[1], m[0].rsplit(".", 1)[1]
    if head in TREE_DIRS or last in FILE_EXTENSIONS or text[m.end() : m.end() + 1] == "*":
        return False
    if re.search(rf"(?<![\w.]){re.escape(head)}\s*=(?!=)", text):
        return False
    return bool(_candidates(head)) or head in _tables()


# --- Resolving them ---------------------------------------------------------------------------


@cache
def _tree_paths() -> tuple[set[str], set[str]]:
    """(files, folders) of the tree, relative to the root."""
    files = set(_tracked())
    folders = {str(Path(p).parent) for p in files}
    folders |= {str(parent) for f in folders for parent in Path(f).parents if str(parent) != "."}
    return files, folders


def _is_tree_path(cited: str, source: str) -> bool:
    """Whether a path-like word claims a file or folder of ours: under a folder of the tree
    (`analyzer/...`, `tests/...`), of analyzer (`sim/vllm/`), or of the citing file's own
    folder (`compiled/dense.py` in sim/vllm/), or a bare source file name (`records.py`);
    not `read/write`, `build/demo/report.html` or vLLM's `vllm/v1/core/kv_cache_utils.py`."""
    if cited.startswith(".") or "*" in cited.split("/")[0]:
        return False
    head = cited.split("/")[0]
    if "/" not in cited:
        return cited.endswith(SOURCE_SUFFIXES)
    _, folders = _tree_paths()
    here = str(Path(source).parent)
    if head in TREE_DIRS:
        return True
    ours = f"analyzer/{head}" in folders or f"{here}/{head}" in folders
    return ours and cited == cited.lower()  # our paths are lower case; not `store/CLI`


@cache
def path_resolves(cited: str) -> bool:
    """A file or folder of the repository whose path is `cited` or ends with it
    (`compiled/dense.py` in a docstring of sim/vllm/ is analyzer/sim/vllm/compiled/dense.py;
    `setup.py` is the root's); `*` globs; or a path git ignores, where a command writes
    (`bench/data/`)."""
    files, folders = _tree_paths()
    want = cited.rstrip("/")
    pattern = re.compile(r"(?:^|.*/)" + re.escape(want).replace(r"\*", "[^/]*") + "$")
    pool = folders if cited.endswith("/") else files | folders
    if any(pattern.match(p) for p in pool):
        return True
    if "." in cited.rsplit("/", 1)[-1] and resolves(cited.replace("/", ".")):
        return True  # `tools/oracle/concurrent_cases.Case.oracle_args`
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", cited], cwd=ROOT)
    return ignored.returncode == 0 and want.split("/")[0] in TREE_DIRS


@cache
def _short_names() -> dict[str, list[str]]:
    """A class's or module's last name -> the dotted paths it may stand for."""
    short: dict[str, list[str]] = {}
    for dotted in _namespaces():
        short.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    return short


def _candidates(head: str) -> list[str]:
    return _short_names().get(head, [])


@cache
def _tables() -> dict[str, set[str]]:
    """Stored table -> its columns, from the CREATE TABLE statements of analyzer/store/sql/."""
    tables: dict[str, set[str]] = {}
    for path in sorted((ROOT / "analyzer/store/sql").glob("*.sql")):
        text = re.sub(r"--[^\n]*", "", path.read_text())
        for m in re.finditer(r"CREATE TABLE(?: IF NOT EXISTS)? (\w+) \((.*?)\n\);", text, re.S):
            columns = {line.split()[0] for line in m[2].splitlines() if line.strip()}
            tables[m[1]] = columns - {"PRIMARY", "UNIQUE", "FOREIGN", "CHECK"}
        for m in re.finditer(r"ALTER TABLE (\w+) ADD COLUMN(?: IF NOT EXISTS)? (\w+)", text):
            tables.setdefault(m[1], set()).add(m[2])
    return tables


def name_resolves(cited: str) -> bool:
    """`X.y...` resolves in one of the classes or modules named X; a lower-case X may be an
    instance of a class so named (`policy.block_size`: Policy's; `meta.insert_len`:
    RequestMeta's); `table.column` in a stored table."""
    head, _, rest = cited.partition(".")
    if rest in _tables().get(head, ()):
        return True
    if any(resolves(f"{c}.{rest}") for c in _candidates(head)):
        return True
    camel = "".join(part.capitalize() for part in head.split("_"))
    classes = [
        dotted
        for short, paths in _short_names().items()
        if short.endswith(camel) and short[:1].isupper()
        for dotted in paths
    ]
    return any(resolves(f"{c}.{rest}") for c in classes)


def anchor_resolves(cited: str) -> bool:
    """`docs/page.md#anchor`: the page has a heading of that anchor."""
    page, _, anchor = cited.partition("#")
    return (ROOT / page).exists() and anchor in _anchors(ROOT / page)


def unresolved() -> list[Reference]:
    check = {
        "module": resolves,
        "path": path_resolves,
        "name": name_resolves,
        "anchor": anchor_resolves,
    }
    return [
        ref
        for kind, refs in references().items()
        for ref in refs
        if ref.text not in ALLOWED and not check[kind](ref.text)
    ]


# --- The tests ------------------------------------------------------------------------------


def test_there_are_references_to_check():
    found = references()
    assert {kind: len(refs) > 20 for kind, refs in found.items()} == dict.fromkeys(found, True)


def test_every_reference_resolves():
    """(issue 48 item 7: 33 references in docstrings named modules that had moved, such as
    `pipeline.trace.Trace` for `access.trace.Trace` and `replay.VllmReplay` for
    `reference.VllmReplay`)"""
    lines = [f"{ref.path}:{ref.line}: `{ref.text}` does not resolve" for ref in unresolved()]
    assert lines == [], "\n" + "\n".join(lines)


def test_allowed_names_are_still_cited_and_still_unresolved():
    """An allowed name that resolves now, or that nothing cites any more, leaves the list."""
    cited = {ref.text for refs in references().values() for ref in refs}
    checks = (resolves, path_resolves, name_resolves)
    stale = sorted(n for n in ALLOWED if n not in cited or any(c(n) for c in checks))
    assert stale == []


# (cited text, the kind it is taken for or None: not a reference, whether it resolves)
RESOLVER_CASES = [
    ("`analyzer.access.trace.Trace`", "module", True),
    ("`analyzer.pipeline.trace.Trace`", "module", False),  # moved to access/
    ("`analyzer.access.trace.Trace.shared_units`", "module", True),  # a union's member's
    ("`analyzer.run_replay`", "module", True),  # analyzer/__init__.py's lazy table
    ("`analyzer.report.html.ReportData.groups`", "module", True),  # through an import
    ("`analyzer.report.html.build_page`", "module", False),
    ("`access.trace.LoadedTrace`", "name", True),
    ("`pipeline.trace.LoadedTrace`", "name", False),
    ("`replay.VllmReplay._sampled`", "name", False),  # sim/vllm/replay.py is reference.py
    ("`reference.VllmReplay._sampled`", "name", True),
    ("`policy.block_size`", "name", True),  # a Policy's field
    ("`meta.insert_len`", "name", True),  # a RequestMeta's
    ("`sources.num_skipped`", "name", True),  # a column of the stored table
    ("`sources.num_skippd`", "name", False),
    ("`MarconiReplay.tuning`", "name", True),  # set in a method
    ("`MarconiReplay.tunings`", "name", False),
    ("`sim/vllm/reference.py`", "path", True),
    ("`compiled/dense.py`", "path", True),
    ("`tests/sim/vllm/test_dense.py`", "path", False),  # under compiled/ now
    ("`store/sql/*.sql`", "path", True),
    ("`bench/data/`", "path", True),  # ignored by git: where the benchmarks write
    ("`records.py`", "path", True),
    ("`nowhere.py`", "path", False),
    ("`docs/definitions.md#the-loss-waterfall`", "anchor", True),
    ("`docs/definitions.md#spec-3`", "anchor", False),
    ("`np.int32`", None, None),
    ("`config.json`", None, None),
    ("e.g. and i.e.", None, None),
    ("`read/write`", None, None),
    ("`build/demo/report.html`", None, None),
    ("`vllm/v1/core/kv_cache_utils.py`", None, None),  # vLLM's
    ("`overrides.py:1341`", None, None),  # another project's file, cited by line
    ("source = request_input(db); `source.nope`", None, None),  # the example's variable
]


@pytest.mark.parametrize(("text", "kind", "ok"), RESOLVER_CASES)
def test_resolver(text, kind, ok):
    found = references_in("analyzer/sim/vllm/x.py", 1, text)
    if kind is None:
        assert found == []
        return
    check = {
        "module": resolves,
        "path": path_resolves,
        "name": name_resolves,
        "anchor": anchor_resolves,
    }[kind]
    assert [(k, r.text) for k, r in found] == [(kind, text.strip("`"))]
    assert check(found[0][1].text) is ok


def test_a_failure_names_file_line_and_reference():
    refs = references_in("analyzer/x.py", 10, '"""One.\n\nSee `pipeline.trace.Trace`."""')
    assert [(r.path, r.line, r.text) for _, r in refs] == [
        ("analyzer/x.py", 12, "pipeline.trace.Trace")
    ]


# --- No citation of a document outside the repository, no path of one machine ----------------

SPEC_CITATION = re.compile(r"\bSPEC(?:\.md| ?[0-9§]|-[0-9]|'s\b| section\b)")
# Absolute paths of one developer's machine: home folders and the workspace (a scratch path
# under /tmp exists on every machine, and each such default has its environment variable).
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:root|home|Users|" + "work" + r")/[\w.-]")
TEXT_SUFFIXES = (".py", ".md", ".sql", ".json", ".txt", ".toml", ".cfg", ".sh", ".c", ".h", ".yaml")


def _text_files() -> list[str]:
    return [
        p
        for p in _tracked()
        if (p.endswith(TEXT_SUFFIXES) or p in ("Makefile", "MANIFEST.in") or p.startswith(".ci/"))
        and (ROOT / p).is_file()
    ]


def _hits(pattern: re.Pattern) -> list[str]:
    return [
        f"{path}:{number}: {line.strip()[:120]}"
        for path in _text_files()
        if path != SELF
        for number, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_spec_citation_remains():
    """Definitions are cited as docs/definitions.md#anchor (issue 48 item 7: 31 "SPEC n"
    citations of ../shared/SPEC.md, which the repository does not ship)."""
    assert _hits(SPEC_CITATION) == []


def test_no_path_of_a_developer_machine_remains():
    """(issue 48 item 7: /root/.cache/hpa-oracle and /work/shared/reference/... in the
    docs, the oracle tools and three engines' docstrings)"""
    assert _hits(MACHINE_PATH) == []


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("see SPEC 3's L2", True),
        ("(SPEC 4.1)", True),
        ("SPEC-5 policy", True),
        ("SPEC.md section 6", True),
        ("(SPEC section 3)", True),
        ("SPEC_DECODE = (...)", False),
        ("C_SPEC_BLOCKS", False),
    ],
)
def test_spec_citation_pattern(line, found):
    assert (SPEC_CITATION.search(line) is not None) is found


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("python3 -m venv /root/.cache/hpa-oracle", True),
        ("`/home/me/x`", True),
        ("Reference: /" + "work/shared/reference/x.md", True),
        ("~/.cache/hpa-oracle/bin/python", False),
        ("../shared/oracle/vllm_oracle.py", False),
        ("git worktree add /tmp/before", False),
        ("tests/golden/oracle/README.md", False),
    ],
)
def test_machine_path_pattern(line, found):
    assert (MACHINE_PATH.search(line) is not None) is found
