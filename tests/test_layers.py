"""The layering rule of docs/ARCHITECTURE.md, checked on the import statements.

errors <- policy <- postprocess <- analysis <- rewrite <- (result, sources, settings, release,
charge, planner) <- session <- backend <- frontends; engines, noise and ledger sit beside and only
the stages and session import them; postprocess (the expression nodes over released values) sits
below analysis, which builds its trees; noise, ledger and postprocess import no sqlglot; frontends
import only session, backend, result, settings, sources and errors. ledger.accounting (zCDP
arithmetic and Cost) is a leaf module of the ledger package with a layer of its own (SUBLAYERS):
the analysis, explain and the rest of the ledger use it; only the stages, session and admin import
the ledger's SQLite store.
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "dpsql"

# module group -> dpsql groups it may import
ALLOWED = {
    "errors": set(),
    "sqltext": set(),     # a lexical leaf (quotes and comments), usable at every layer
    "dialects": set(),    # engine capabilities as data (sqlglot only), for the analysis and the rewrite
    "ledger.accounting": set(),  # zCDP and composition arithmetic, and Cost: a leaf
    "filetypes": {"errors"},   # declared types of file tables: what the policy, the engines and init share
    "policy": {"errors", "filetypes"},
    "analysis": {"errors", "policy", "ledger.accounting", "analysis", "sqltext", "dialects", "postprocess"},
    "rewrite": {"errors", "policy", "ledger.accounting", "analysis", "rewrite", "dialects"},
    "engines": {"errors", "engines", "filetypes"},
    "noise": {"errors", "noise"},
    "ledger": {"errors", "ledger.accounting"},  # the store, group commit, answer cache and audit log
    "explain": {"analysis", "ledger.accounting"},  # EXPLAIN DP rows: formatting for the session
    "postprocess": {"errors"},   # released values only (no sqlglot): below analysis, which builds its nodes
    "datagen": set(),
    "demo": {"datagen"},
    # the stages Session calls, between rewrite and session (docs/ARCHITECTURE.md: the line)
    "result": {"errors", "ledger.accounting", "analysis", "ledger", "explain"},   # Result, Accuracy: what a statement returns
    "sources": {"errors", "policy", "analysis", "engines"},    # read_schema, the ledger and audit paths
    "settings": {"errors", "policy", "analysis", "result"},    # SET/RESET/SHOW dpsql.*: the settings table
    "release": {"errors", "analysis", "rewrite", "noise", "postprocess", "result"},   # mechanisms, noise, accuracy
    "charge": {"errors", "ledger.accounting", "analysis", "ledger", "policy", "explain"},  # cost, advice
    "planner": {"errors", "policy", "analysis", "rewrite", "noise", "charge", "release"},  # plans, re-plans, cache
    "session": {"errors", "policy", "ledger.accounting", "analysis", "rewrite", "engines", "noise", "ledger",
                "explain", "demo", "result", "sources", "settings", "release", "charge", "planner"},
    "backend": {"errors", "policy", "analysis", "engines", "planner", "sources", "session"},   # sessions sharing one engine
    "admin": {"errors", "policy", "analysis", "engines", "ledger", "sources", "demo"},   # budget report, policy check
    "starter": {"errors", "engines", "filetypes"},    # `dpsql init`: a starter policy from a file's names and types
    "frontends": {"errors", "session", "backend", "result", "settings", "sources", "admin", "frontends", "sqltext",
                  "starter"},
    "__init__": {"errors", "frontends"},
}
NO_SQLGLOT = {"noise", "ledger", "postprocess", "engines", "policy", "errors", "sqltext", "ledger.accounting",
              "filetypes"}
# package -> its modules that have a layer of their own (a leaf others may import without the package's rest)
SUBLAYERS = {"ledger": {"accounting"}}


def _group(path: Path) -> str:
    rel = path.relative_to(PKG)
    if len(rel.parts) == 1:
        return rel.stem
    if rel.parts[1].removesuffix(".py") in SUBLAYERS.get(rel.parts[0], ()):
        return f"{rel.parts[0]}.{rel.parts[1].removesuffix('.py')}"
    return rel.parts[0]


def _target(parts: list[str]) -> str:
    """The layer of the imported name dpsql.<parts[1]>.<...> (parts: the dotted name split, "dpsql" first)."""
    if len(parts) > 2 and parts[2] in SUBLAYERS.get(parts[1], ()):
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            if node.module.split(".")[0] == "dpsql" and node.module.count(".") <= 1:
                for a in node.names:         # `from dpsql.ledger import accounting` names a module
                    yield f"{node.module}.{a.name}"


def test_every_module_has_a_layer():
    for path in PKG.rglob("*.py"):
        assert _group(path) in ALLOWED, f"{path} is in no layer: add it to tests/test_layers.py"


def test_imports_point_left_only():
    bad = []
    for path in PKG.rglob("*.py"):
        group = _group(path)
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "sqlglot" and group in NO_SQLGLOT:
                bad.append(f"{path.relative_to(PKG)} imports sqlglot")
            if parts[0] != "dpsql" or len(parts) < 2:
                continue
            target = _target(parts)
            if target not in ALLOWED[group] and target != group:
                bad.append(f"{path.relative_to(PKG)} imports dpsql.{target}")
    assert not bad, "layering violations:\n" + "\n".join(bad)
