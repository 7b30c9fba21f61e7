"""Every SQL statement lives in `analyzer/store/sql/` (issue 11): code names a statement with
`load_sql(name)`, never writes one inline, and every file there is used."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "analyzer"
SQL_DIR = ROOT / "store" / "sql"
MODULES = sorted(ROOT.rglob("*.py"))
# A string that begins like a statement (upper case, as every statement here is written).
STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT INTO|DELETE FROM|UPDATE|CREATE|DROP|ALTER|WITH|COPY|DESCRIBE"
    r"|PRAGMA|SET|BEGIN|COMMIT|ROLLBACK|ATTACH|EXPORT|IMPORT)\b"
)
EXECUTORS = {"execute": 0, "executemany": 0, "sql": 0, "query": 0}  # method -> SQL argument
FUNCTIONS = {"query_arrow": 1, "run_query": 0}


def _strings(node: ast.AST) -> list[str]:
    """The literal text of a string constant or f-string (its constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value for v in node.values if isinstance(v, ast.Constant))]
    return []


def _sql_argument(call: ast.Call) -> ast.AST | None:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in EXECUTORS:
        index = EXECUTORS[func.attr]
    elif isinstance(func, ast.Name) and func.id in FUNCTIONS:
        index = FUNCTIONS[func.id]
    else:
        return None
    return call.args[index] if len(call.args) > index else None


def _offences(path: Path) -> list[str]:
    """`path:line: what` for each inline statement (an SQL argument given as a string, or a
    string that reads as a statement), once per line."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        arg = _sql_argument(node) if isinstance(node, ast.Call) else None
        if arg is not None and (_strings(arg) or isinstance(arg, ast.BinOp)):
            found.setdefault(node.lineno, "inline SQL argument")
        for text in _strings(node):
            if STATEMENT.match(text):
                found.setdefault(node.lineno, repr(text[:40]))
    return [f"{path}:{line}: {what}" for line, what in sorted(found.items())]


def test_no_module_writes_sql_inline():
    offences = [o for path in MODULES for o in _offences(path)]
    assert offences == [], "move these statements to analyzer/store/sql/:\n" + "\n".join(offences)


def _named_statements() -> set[str]:
    names = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "load_sql"
            ):
                arg = node.args[0]
                names.update(_load_sql_names(arg))
    return names


def _load_sql_names(arg: ast.AST) -> set[str]:
    """The statement names a load_sql argument can take: a literal, a conditional of two,
    or a literal plus a conditional suffix."""
    if isinstance(arg, ast.Constant):
        return {arg.value}
    if isinstance(arg, ast.IfExp):
        return _load_sql_names(arg.body) | _load_sql_names(arg.orelse)
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return {a + b for a in _load_sql_names(arg.left) for b in _load_sql_names(arg.right)}
    pytest.fail(f"load_sql({ast.unparse(arg)}): name the statement literally")


def test_every_named_statement_exists_and_every_file_is_used():
    files = {p.stem for p in SQL_DIR.glob("*.sql")}
    named = _named_statements()
    assert sorted(named - files) == [], "load_sql names a file that does not exist"
    assert sorted(files - named) == [], "no code loads these statements"


def test_the_check_sees_inline_sql(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(con, t):\n"
        '    con.execute(f"SELECT * FROM {t}")\n'
        '    con.execute("sel" + t)\n'
        '    query_arrow(con, "select 1")\n'
        '    STATEMENT = """\nDELETE FROM requests"""\n'
        '    con.execute(load_sql("name"), {"t": t})\n'
    )
    assert [o.split(":")[1] for o in _offences(bad)] == ["2", "3", "4", "5"]
