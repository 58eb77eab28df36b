"""Resolve a parsed query against the policy and build its QueryPlan.

This is the subset check (it mirrors grammars/dpsql.lark, the documented subset) and the
privacy analysis in one walk, on the normalised query (dpsql.analysis.normalize: names
qualified, row-level CTEs and subqueries inlined, BI-tool wrappers split off) and its bound
FROM relation (dpsql.analysis.bind: protected and public tables, joins on the unit, links,
per-unit subqueries; semi-joins on the unit in WHERE, dpsql.analysis.semijoin). It accepts:

* SELECT items: GROUP BY columns, COUNT(*), COUNT(col), SUM(col), AVG(col) of declared
  numeric columns, and + - * / and unary minus over those and numeric literals
  (post-processing of noisy values);
* WHERE: AND/OR/NOT of comparisons, BETWEEN, IN (literal list), IS [NOT] NULL and LIKE/ILIKE
  that cannot fail on any row (dpsql.analysis.predicates), and semi-joins on the unit;
* GROUP BY declared columns (public domain, a public table's values, or thresholded
  partition selection);
* HAVING, ORDER BY, LIMIT, OFFSET and outer wrapper queries, evaluated after the noise.

Everything else is refused with QueryRejected naming the construct and the reason.
Messages name constructs and columns, never data values.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from dpsql.analysis import windows
from dpsql.analysis.normalize import check_shape, normalize, output_name
from dpsql.analysis.outputs import count_literal
from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.folding import fold_dates, fold_numbers
from dpsql.analysis.sqltypes import NUMERIC, date_bounds_problem, family
from dpsql.analysis.private_query import Analysis
from dpsql.analysis.tables import check_collation, check_public, policy_table, qualified_names, table_name
from dpsql.errors import QueryRejected
from dpsql.policy import Policy

DomainReader = Callable[..., tuple]     # (public table, column[, "range"]) -> its distinct values (or MIN, MAX) as text


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class Schema:
    """What the engine says about the tables, read at connect time and again whenever a query
    finds a fact changed (every fact a plan relies on is re-checked in the query's own
    transaction: dpsql.sources.read_schema, Engine.run's expect)."""
    columns: Mapping[str, Mapping[str, str]]          # protected table -> column -> type
    unique_units: frozenset[str] = frozenset()        # protected tables whose unit is PK/UNIQUE
    base_tables: frozenset[str] = frozenset()         # every base table (lower-case)
    views: frozenset[str] = frozenset()
    not_null_units: frozenset[str] = frozenset()      # protected tables whose unit is NOT NULL
    facts: Mapping[str, Any] = field(default_factory=dict)     # engine reference -> engines.base.TableFacts
    public: Mapping[str, Mapping[str, str]] = field(default_factory=dict)   # public table -> column -> type
    # (schema, catalog) unqualified names are read from (Engine.namespace); None: qualified names refused
    namespace: tuple[str, str | None] | None = None



@dataclass(frozen=True)
class Settings:
    epsilon: float
    delta: float
    mechanism: str
    budget_delta: float | None = None   # the analyst's lifetime delta (policy), for actionable hints



@dataclass(frozen=True)
class PublicQuery:
    """A query touching no protected table: passed through unchanged, charged nothing."""
    sql: str
    tree: exp.Expression = field(repr=False)
    tables: tuple[str, ...] = ()       # the public base tables it reads (checked again when it runs)



def check_policy_types(policy: Policy, schema: Schema) -> list[str]:
    """Problems between declared bounds/domains and the engine's column types."""
    problems = []
    for t in policy.tables.values():
        cols = schema.columns.get(t.name, {})
        for c in t.columns.values():
            fam = family(cols.get(c.name, "other"))
            if c.bounded and fam not in NUMERIC:
                problems.append(f"tables.{t.name}.columns.{c.name}: bounds given but the column is not numeric")
            if c.span is not None:
                problem = date_bounds_problem(c, cols.get(c.name, "other"))
                if problem:
                    problems.append(f"tables.{t.name}.columns.{c.name}: {problem}")
            if c.values is not None:
                want_str = fam in ("text",)
                if fam not in ("text", "int"):
                    problems.append(f"tables.{t.name}.columns.{c.name}: a value domain needs a text or integer column")
                elif any(isinstance(v, str) != want_str for v in c.values):
                    problems.append(f"tables.{t.name}.columns.{c.name}: domain values must be "
                                    f"{'strings' if want_str else 'whole numbers'} like the column")
    return problems


# ----------------------------------------------------------------------------- entry

def analyze(tree: exp.Expression, policy: Policy, schema: Schema, settings: Settings,
            dialect: str = "duckdb", domains: DomainReader | None = None) -> QueryPlan | PublicQuery:
    """Check the query against the subset and the policy; build its plan.

    domains: reads a public table column's distinct values (the Session's engine), for GROUP BY
    keys that are public-table columns."""
    _refuse_statement_kind(tree)
    # qualified_names returns a copy (the statement's tree is never changed: a plan may be made
    # again from it), which the folding then changes in place
    tree = fold_numbers(fold_dates(qualified_names(tree, policy, schema), copy=False))
    window = None
    whole = tree
    windowed = windows.has_windows(tree)      # (a walk of the whole tree: asked once)
    distinct_only = not windowed and windows.distinct_over_groups(tree)
    if windowed or distinct_only:      # post-processing of the released rows
        tree, window = windows.split(tree, output_name)
    check_shape(tree)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = []
    for t in tree.find_all(exp.Table):
        name = table_name(t)
        if name is None:
            raise QueryRejected("a table function or file reader", "it can read data that the policy does not describe")
        if name in ctes:
            if policy_table(policy, name) is not None or name in schema.base_tables:
                raise QueryRejected(f"the common table expression {name!r}", "it has the name of a table",
                                    "give it a name of its own")
            continue
        names.append(name)
    protected = [n for n in names if policy_table(policy, n) is not None]
    if not protected:
        if distinct_only:
            return _public(whole, policy, schema, dialect)
        if window is not None:
            raise QueryRejected("window functions over public tables", "not part of the accepted subset")
        return _public(tree, policy, schema, dialect)
    check_collation(schema)
    for name in names:
        if name not in protected:
            check_public(name, policy, schema)
    visible: dict[str, Mapping[str, str]] = {}
    for t in policy.tables.values():
        visible[t.name] = schema.columns.get(t.name, {})
        if t.source:
            visible.setdefault(t.source.lower().split(".")[-1], schema.columns.get(t.name, {}))
    for name in names:
        if name not in visible and name in schema.public:
            visible[name] = schema.public[name]
    norm = normalize(tree, visible)
    plan = Analysis(norm, tree, policy, schema, settings, dialect, domains).plan()
    if window is None:
        return plan
    if plan.wraps or plan.topk is not None:
        raise QueryRejected("SELECT DISTINCT over this query" if distinct_only else "window functions over this query",
                            "not part of the accepted subset")
    wrap = windows.compile_wrap(window, [o.name for o in plan.outputs], count_literal(window["limit"], "LIMIT"),
                                count_literal(window["offset"], "OFFSET") or 0)
    return replace(plan, wraps=(wrap,), names=tuple(name for name, _ in wrap.outputs))



def _refuse_statement_kind(tree: exp.Expression) -> None:
    if isinstance(tree, exp.Select):
        return
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        raise QueryRejected("set operations (UNION/INTERSECT/EXCEPT)",
                            "combining result sets would let one person's rows count twice",
                            "ask each SELECT as a query of its own (each charged), or one GROUP BY over the rows")
    names = {
        exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Create: "CREATE",
        exp.Drop: "DROP", exp.Alter: "ALTER", exp.Copy: "COPY", exp.Pragma: "PRAGMA",
        exp.Attach: "ATTACH", exp.Detach: "DETACH", exp.Export: "EXPORT", exp.Merge: "MERGE",
        exp.Use: "USE", exp.Set: "SET", exp.Describe: "DESCRIBE", exp.Transaction: "a transaction statement",
        exp.Commit: "COMMIT", exp.Rollback: "ROLLBACK", exp.TruncateTable: "TRUNCATE",
    }
    for cls, name in names.items():
        if isinstance(tree, cls):
            raise QueryRejected(name, "dpsql answers read-only aggregate SELECT queries only")
    if isinstance(tree, exp.Command):
        word = str(tree.this).split()[0].upper() if tree.this else "this command"
        raise QueryRejected(word, "dpsql answers read-only aggregate SELECT queries only")
    raise QueryRejected(type(tree).__name__.upper(), "dpsql answers read-only aggregate SELECT queries only")


# ----------------------------------------------------------------------------- public

_PUBLIC_FUNCS = (
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Coalesce, exp.Cast, exp.Abs, exp.Round,
    exp.Lower, exp.Upper, exp.Length, exp.Substring, exp.Concat, exp.Case, exp.If, exp.Floor,
    exp.Ceil, exp.Trim, exp.Nullif, exp.Extract, exp.DateTrunc, exp.CurrentDate,
)



def _public(tree: exp.Expression, policy: Policy, schema: Schema, dialect: str) -> PublicQuery:
    """Pass a query on public tables through, if it only reads base tables the policy declares public.

    Fail closed: a table the policy neither protects nor declares public ([public] tables) is
    refused, so a sensitive table the administrator forgot, or one created after the policy was
    written, is never read row by row (unless the policy opts out with undeclared = "public").
    Views are refused (dpsql cannot see what a view reads: it might read a protected
    table), and so is every function not on a short list of plain scalar and
    aggregate functions (no file readers, table functions or settings).
    """
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for t in tree.find_all(exp.Table):
        name = table_name(t)
        if name is None:
            raise QueryRejected("a table function or file reader",
                                "it can read data that the policy does not describe")
        if name not in ctes:
            check_public(name, policy, schema)
    for node in tree.find_all(exp.Func):
        if isinstance(node, exp.Anonymous) or not isinstance(node, _PUBLIC_FUNCS + (exp.Binary, exp.Unary, exp.Connector)):
            raise QueryRejected(f"the function {node.sql_name() if not isinstance(node, exp.Anonymous) else node.name}",
                                "only plain scalar and aggregate functions are allowed on public tables")
    for cls, what in ((exp.Into, "SELECT INTO"), (exp.Lock, "locking clauses")):
        if tree.find(cls):
            raise QueryRejected(what, "dpsql answers read-only queries only")
    names = tuple(dict.fromkeys(n for t in tree.find_all(exp.Table) if (n := table_name(t)) and n not in ctes))
    return PublicQuery(tree.sql(dialect, comments=False), tree, names)
