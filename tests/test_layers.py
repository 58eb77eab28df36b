"""The layering rule of shared/DESIGN.md, checked on the import statements.

errors <- policy <- analysis <- rewrite <- (result, sources, settings, release, charge, planner)
<- session <- backend <- frontends; engines, noise, ledger, guard, postprocess sit beside and only
the stages and session import them; noise and ledger import no sqlglot; frontends import only
session, backend, result, settings, sources and errors. accounting (zCDP arithmetic) is a leaf that
the ledger, explain and session use.
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "dpsql"

# module group -> dpsql groups it may import
ALLOWED = {
    "errors": set(),
    "sqltext": set(),     # a lexical leaf (quotes and comments), usable at every layer
    "cost": set(),
    "dialects": set(),    # engine capabilities as data (sqlglot only), for the analysis and the rewrite
    "accounting": set(),  # zCDP and composition arithmetic: a leaf, like cost
    "filetypes": {"errors"},   # declared types of file tables: what the policy, the engines and init share
    "policy": {"errors", "filetypes"},
    "analysis": {"errors", "policy", "cost", "analysis", "sqltext", "dialects"},
    "rewrite": {"errors", "policy", "cost", "analysis", "rewrite", "dialects"},
    "engines": {"errors", "engines", "filetypes"},
    "noise": {"errors", "noise"},
    "ledger": {"errors", "accounting"},
    "guard": {"errors"},  # answer cache codec and audit log, beside the ledger
    "explain": {"analysis", "cost", "accounting"},  # EXPLAIN DP rows: formatting for the session
    "postprocess": {"errors"},
    "datagen": set(),
    "demo": {"datagen"},
    # the stages Session calls, between rewrite and session (docs/ARCHITECTURE.md: the line)
    "result": {"errors", "cost", "analysis", "ledger", "guard", "explain"},   # Result, Accuracy: what a statement returns
    "sources": {"errors", "policy", "analysis", "engines"},    # read_schema, the ledger and audit paths
    "settings": {"errors", "policy", "analysis", "result"},    # SET/RESET/SHOW dpsql.*: the settings table
    "release": {"errors", "analysis", "rewrite", "noise", "postprocess", "result"},   # mechanisms, noise, accuracy
    "charge": {"errors", "cost", "accounting", "analysis", "ledger", "guard", "policy", "explain"},  # cost, advice
    "planner": {"errors", "policy", "analysis", "rewrite", "noise", "charge", "release"},  # plans, re-plans, cache
    "session": {"errors", "policy", "cost", "analysis", "rewrite", "engines", "noise", "ledger", "guard",
                "explain", "demo", "result", "sources", "settings", "release", "charge", "planner"},
    "backend": {"errors", "policy", "analysis", "engines", "planner", "sources", "session"},   # sessions sharing one engine
    "admin": {"errors", "policy", "analysis", "engines", "ledger", "sources", "demo"},   # budget report, policy check
    "starter": {"errors", "engines", "filetypes"},    # `dpsql init`: a starter policy from a file's names and types
    "frontends": {"errors", "session", "backend", "result", "settings", "sources", "admin", "frontends", "sqltext",
                  "starter"},
    "__init__": {"errors", "frontends"},
}
NO_SQLGLOT = {"noise", "ledger", "guard", "postprocess", "engines", "policy", "errors", "cost", "sqltext", "accounting",
              "filetypes"}


def _group(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            if node.module == "dpsql":
                for a in node.names:
                    yield f"dpsql.{a.name}"


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
            target = parts[1]
            if target not in ALLOWED[group] and target != group:
                bad.append(f"{path.relative_to(PKG)} imports dpsql.{target}")
    assert not bad, "layering violations:\n" + "\n".join(bad)
