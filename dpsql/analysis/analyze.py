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

import datetime as _dt
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.analysis import distinct as distinct_counts
from dpsql.analysis import quantiles as quantile_measures
from dpsql.analysis import reconstruction
from dpsql.analysis import sample_aggregate as sa
from dpsql.analysis import windows
from dpsql.analysis import sensitivity as sens
from dpsql.analysis.bind import Catalog, _conjuncts, _resolve_in, bind, cast_in_bounds, exact_bounds
from dpsql.analysis.expressions import Derived, Expressions
from dpsql.analysis.normalize import (
    Normalized,
    Wrapper,
    check_shape,
    normalize,
    output_name,
)
from dpsql.analysis.plan import (
    GroupKey,
    Measure,
    NoiseSpec,
    Output,
    QueryPlan,
    Selection,
    Wrap,
)
from dpsql.analysis.predicates import (
    CMP,
    NUMBER,
    NUMERIC,
    Predicates,
    date_bounds_problem,
    family,
    fold_dates,
    fold_numbers,
    refuse_expression,
    tracking,
)
from dpsql.analysis.relation import ColRef, ColumnInfo, Relation
from dpsql.analysis.semijoin import SemiJoins
from dpsql.analysis.suggest import table_hint
from dpsql.analysis.suggest import undeclared_table_hint as _or_ask
from dpsql.cost import Cost
from dpsql.dialects import dialect as engine_dialect
from dpsql.errors import QueryRejected, UndefinedTable
from dpsql.policy import Policy, TablePolicy
from dpsql.postprocess.expr import (
    Add, And, Avg, Cmp, Div, Expr, IsNull, Key, Lit, Mul, Neg, Not, Or, Ref, Sub, Var,
)

MAX_PUBLIC_GROUPS = 1_000_000
_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop,
               exp.StddevSamp) + sa.AGGREGATES
_ARITH = {exp.Add: Add, exp.Sub: Sub, exp.Mul: Mul, exp.Div: Div}
DomainReader = Callable[..., tuple]     # (public table, column[, "range"]) -> its distinct values (or MIN, MAX) as text


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class Schema:
    """What the engine says about the tables, read at connect time and again whenever a query
    finds a fact changed (every fact a plan relies on is re-checked in the query's own
    transaction: dpsql.session.read_schema, Engine.run's expect)."""
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
    tree = fold_numbers(fold_dates(_qualified_names(tree, policy, schema)))
    window = None
    whole = tree
    distinct_only = not windows.has_windows(tree) and windows.distinct_over_groups(tree)
    if windows.has_windows(tree) or distinct_only:      # post-processing of the released rows
        tree, window = windows.split(tree, output_name)
    check_shape(tree)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = []
    for t in tree.find_all(exp.Table):
        name = _table_name(t)
        if name is None:
            raise QueryRejected("a table function or file reader", "it can read data that the policy does not describe")
        if name in ctes:
            if _policy_table(policy, name) is not None or name in schema.base_tables:
                raise QueryRejected(f"the common table expression {name!r}", "it has the name of a table",
                                    "give it a name of its own")
            continue
        names.append(name)
    protected = [n for n in names if _policy_table(policy, n) is not None]
    if not protected:
        if distinct_only:
            return _public(whole, policy, schema, dialect)
        if window is not None:
            raise QueryRejected("window functions over public tables", "not part of the accepted subset")
        return _public(tree, policy, schema, dialect)
    _check_collation(schema)
    for name in names:
        if name not in protected:
            _check_public(name, policy, schema)
    visible: dict[str, Mapping[str, str]] = {}
    for t in policy.tables.values():
        visible[t.name] = schema.columns.get(t.name, {})
        if t.source:
            visible.setdefault(t.source.lower().split(".")[-1], schema.columns.get(t.name, {}))
    for name in names:
        if name not in visible and name in schema.public:
            visible[name] = schema.public[name]
    norm = normalize(tree, visible)
    plan = _Analysis(norm, tree, policy, schema, settings, dialect, domains).plan()
    if window is None:
        return plan
    if plan.wraps or plan.topk is not None:
        raise QueryRejected("SELECT DISTINCT over this query" if distinct_only else "window functions over this query",
                            "not part of the accepted subset")
    wrap = windows.compile_wrap(window, [o.name for o in plan.outputs], _count_literal(window["limit"], "LIMIT"),
                                _count_literal(window["offset"], "OFFSET") or 0)
    return replace(plan, wraps=(wrap,), names=tuple(name for name, _ in wrap.outputs))


_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")


def _ident(node: exp.Expression | None) -> str | None:
    """A name part as PostgreSQL reads it: unquoted folded to lower case, quoted kept exactly."""
    if not isinstance(node, exp.Identifier):
        return None
    return node.this if node.args.get("quoted") else node.this.lower()


def _engine_name(ref: str, namespace: tuple[str, str | None]) -> tuple[str | None, str, str] | None:
    """A protected table's engine reference (its `source` or name) as (catalog, schema, table), the
    engine's schema filled in for a plain name; None for a file source (not a plain name)."""
    parts = ref.lower().split(".")
    if len(parts) > 3 or not all(_PLAIN_NAME.fullmatch(p) for p in parts):
        return None
    parts = [namespace[0]] * (len(parts) == 1) + parts
    return (parts[0] if len(parts) == 3 else None, parts[-2], parts[-1])


def _qualified_names(tree: exp.Expression, policy: Policy, schema: Schema) -> exp.Expression:
    """Schema-qualified table names (`public.people`, `"public"."people"`, DuckDB's `main.people`
    and `people.main.people`, and columns qualified the same way, as Metabase writes them) read as
    the plain name, when they name the very table the plain name reads; refused otherwise.

    Why this is the same query, with the same guarantee: the engine reads a plain table name from
    one schema (PostgreSQL: the search_path dpsql sets, that schema then pg_temp; DuckDB: `main` of
    the database it opened), reported by Engine.namespace, and every fact dpsql relies on (the
    policy's tables, their columns and keys, the base tables and views a public query may read) is
    read from there. A name qualified by that schema (and, if it has one, by that database's name
    as its catalog) names the table the plain name names, with one exception each way, both
    refused: the plain name may read another table (a protected table whose `source` is in another
    schema or is a file, or whose policy name is not its engine name: `staff` read from
    `staff_raw`), and a plain name may be a CTE of the query, which a qualified name never is. A
    protected table whose source names its schema (`analytics.visits_raw`) is named by that schema.
    Any other schema or catalog fails closed: `other.people` is a table dpsql has no facts about,
    neither the protected `people` nor a public table, whatever its name. Quoted parts must match
    exactly, unquoted ones are folded to lower case as PostgreSQL folds them. Engines that report
    no namespace (Spark) have every qualified name refused."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    ns = schema.namespace

    def refuse(written: str, why: str) -> QueryRejected:
        where = f"{ns[0]}" if ns is not None else "the database's default schema"
        return QueryRejected(f"the qualified table name {written}", why,
                             f"name the table plainly ({written.rsplit('.', 1)[-1]})"
                             + (f" or by the schema it is read from ({where}.TABLE)" if ns is not None else ""))

    def plain(t: exp.Expression) -> str | None:
        """The plain name a qualified table (or a column's table part) stands for, or None."""
        parts = [t.args.get(k) for k in ("catalog", "db", "this" if isinstance(t, exp.Table) else "table")]
        written = ".".join(p.sql("postgres") for p in parts if p is not None)
        if ns is None:
            raise refuse(written, "dpsql reads tables from the database's default schema only")
        catalog, sch, name = (_ident(p) for p in parts)
        if name is None or sch is None or (parts[0] is not None and catalog is None):
            raise refuse(written, "it is not a plain table name")
        if catalog is not None and catalog != (ns[1] or "").lower() and catalog != ns[1]:
            raise refuse(written, f"{catalog!r} is not the database dpsql reads")
        for t_pol in policy.tables.values():
            ref = _engine_name(t_pol.source or t_pol.name, ns)
            if ref is not None and ref[1:] == (sch, name) and (ref[0] is None or catalog in (None, ref[0])):
                short = ref[2]
                if _policy_table(policy, short) is not t_pol or short in ctes:
                    raise refuse(written, "its plain name would read another table")
                return short
        if sch != ns[0]:
            raise refuse(written, f"dpsql reads tables from the schema {ns[0]!r} only; a table of another "
                         "schema is not described by the policy, whatever its name")
        if _policy_table(policy, name) is not None:
            raise refuse(written, "the policy reads the protected table of that name from another table "
                         "(its source)")
        if name in ctes:
            raise refuse(written, "a qualified name names a table, and the query has a CTE of that name")
        return name

    def one(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and (node.args.get("db") or node.args.get("catalog")):
            name = plain(node)
            out = node.copy()
            out.set("db", None)
            out.set("catalog", None)
            out.set("this", exp.to_identifier(name))
            return out
        if isinstance(node, exp.Column) and (node.args.get("db") or node.args.get("catalog")):
            plain(node)
            out = node.copy()
            out.set("db", None)
            out.set("catalog", None)
            return out
        return node
    return tree.transform(one)


def _check_collation(schema: Schema) -> None:
    """Refuse every private query when the engine compares text without a collation of its own
    by one that is not bytewise (DuckDB's default_collation, on a connection its owner passed in:
    TableFacts.collation, checked again in each query's transaction). Then not only a column's
    values but the query's literals (a CASE key 'A' or 'a') and dpsql's own texts (the keys the
    parts of a query are joined on, rewrite/keys.py) would be held equal when they differ, and a
    group shown with the spelling of the first row met: bind.exact_equality has the argument."""
    for facts in schema.facts.values():
        collation = getattr(facts, "collation", None)
        if collation:
            raise QueryRejected("private queries on this connection",
                                f"its default collation ({collation}) holds different texts equal, so the engine "
                                "could merge groups and show the spelling of whichever row it meets first: the "
                                "answer could reveal one person's row",
                                "ask the connection's owner to RESET default_collation (dpsql's own connections "
                                "keep the binary default)")


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


def _table_name(t: exp.Table) -> str | None:
    return t.this.name.lower() if isinstance(t.this, exp.Identifier) else None


def _policy_table(policy: Policy, name: str) -> TablePolicy | None:
    """The protected table a reference names: by its policy name or by its `source`."""
    table = policy.table(name)
    if table is not None:
        return table
    for t in policy.tables.values():
        if t.source and t.source.lower().split(".")[-1] == name:
            return t
    return None


def _check_public(name: str, policy: Policy, schema: Schema) -> None:
    """A table that is not protected may be read only if it is a base table the policy declares
    public. The declaration is checked first: a table the policy does not mention is refused with
    the same message whether or not it exists."""
    if name in schema.views:
        raise QueryRejected(f"the view {name!r}", "a view may read protected tables; query the tables themselves")
    others = schema.base_tables if policy.public.undeclared == "public" else ()
    if not policy.is_public(name):
        raise QueryRejected(f"the table {name!r}", "the policy does not declare it public",
                            _or_ask(table_hint(name, policy, others)))
    if name not in schema.base_tables:
        raise UndefinedTable(f"the table {name!r}", "no such table", table_hint(name, policy, others))


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
        name = _table_name(t)
        if name is None:
            raise QueryRejected("a table function or file reader",
                                "it can read data that the policy does not describe")
        if name not in ctes:
            _check_public(name, policy, schema)
    for node in tree.find_all(exp.Func):
        if isinstance(node, exp.Anonymous) or not isinstance(node, _PUBLIC_FUNCS + (exp.Binary, exp.Unary, exp.Connector)):
            raise QueryRejected(f"the function {node.sql_name() if not isinstance(node, exp.Anonymous) else node.name}",
                                "only plain scalar and aggregate functions are allowed on public tables")
    for cls, what in ((exp.Into, "SELECT INTO"), (exp.Lock, "locking clauses")):
        if tree.find(cls):
            raise QueryRejected(what, "dpsql answers read-only queries only")
    names = tuple(dict.fromkeys(n for t in tree.find_all(exp.Table) if (n := _table_name(t)) and n not in ctes))
    return PublicQuery(tree.sql(dialect, comments=False), tree, names)


# ----------------------------------------------------------------------------- private

_ALLOWED_SELECT_ARGS = {"expressions", "from_", "where", "group", "having", "order", "limit", "offset", "joins"}
_ARG_NAMES = {
    "distinct": ("SELECT DISTINCT without aggregates", "distinct rows reveal which values exist",
                 "count them instead (SELECT k, COUNT(*) FROM t GROUP BY k), or SELECT DISTINCT over an aggregate "
                 "query's rows (SELECT DISTINCT k, COUNT(*) ... GROUP BY k, j)"),
    "qualify": ("QUALIFY", "window filters act on true values"),
    "windows": ("WINDOW", "window functions act on true values"),
    "laterals": ("LATERAL", "lateral joins are not supported"),
    "sample": ("TABLESAMPLE", "sampling is not part of the accepted subset"),
    "into": ("SELECT INTO", "dpsql answers read-only queries only"),
    "locks": ("locking clauses", "dpsql answers read-only queries only"),
    "pivots": ("PIVOT", "pivoting is not part of the accepted subset"),
}


class _Analysis:
    def __init__(self, norm: Normalized, original: exp.Expression, policy: Policy, schema: Schema,
                 settings: Settings, dialect: str, domains: DomainReader | None):
        self.norm, self.original, self.policy, self.schema = norm, original, policy, schema
        self.settings, self.dialect, self.domains = settings, dialect, domains
        self.public_reads = False          # a public column's range was read from the engine
        self.engine = engine_dialect(dialect)
        self.cat = Catalog(policy, schema.columns, schema.facts, schema.public, self.engine, norm.ctes)
        self.measures: dict[tuple, Measure] = {}
        self.keys: list[GroupKey] = []
        self.key_refs: list = []           # per key: its ColRef, or "expr:<sql>" for an expression
        self.aliases: dict[str, Expr] = {}
        self.alias_twice: set[str] = set()     # AS names of two different SELECT items
        self.narrow: dict[ColRef, tuple[frozenset | None, frozenset]] = {}

    # -- names
    def resolve(self, col: exp.Column, where: str) -> tuple[ColRef, ColumnInfo]:
        """The column a (qualified) reference names; it must be declared (or be the unit)."""
        if isinstance(col.this, exp.Star):
            raise refuse_expression(exp.Star(), where)
        ref, info = _resolve_in(list(self.rel.instances), col)
        if not info.declared and ref not in self.rel.unit_class:
            inst = self.rel.instance(ref[0])
            owner = inst.policy.name if inst is not None and inst.policy is not None else ref[0]
            raise QueryRejected(f"the column {info.name!r}",
                                f"it is not declared in the policy for table {owner!r}",
                                "ask the data owner to declare it (bounds or a public value domain)")
        return ref, info

    # -- main
    def _no_delta(self, selection: bool, gaussian: bool) -> QueryRejected:
        """The refusal of a query that needs a delta when the session's is 0, with a fix the
        analyst can apply, or, when the policy gives the analyst no delta at all, what its
        administrator can change."""
        s = self.settings
        open_keys = [k.column for k in self.keys if k.domain is None]
        what = ("partition selection (GROUP BY " + ", ".join(open_keys) + ", which has no public value "
                "domain, so which groups exist must itself be released privately)") if selection else ""
        if gaussian:
            what = (what + " and " if what else "") + f"the {s.mechanism} mechanism"
        fixes = []
        if gaussian:
            fixes.append("SET dpsql.mechanism = 'laplace'")
        if s.budget_delta is not None and s.budget_delta <= 0:
            reason = f"{what} needs a positive delta, and the policy gives this analyst's budget no delta (delta = 0)"
            admin = []
            if selection:
                admin.append("declare a public value domain for " + ", ".join(open_keys)
                             + " (values = [...] under its [tables.TABLE.columns.COLUMN])")
            admin.append("set a positive budget.delta (e.g. 1e-6) in the policy")
            hint = ("; or ".join(fixes) + "; otherwise " if fixes else "") + \
                "the policy's administrator can " + ", or ".join(admin)
            return QueryRejected("this query", reason, hint)
        fixes.insert(0, "SET dpsql.delta = 1e-7 (any small positive value"
                     + (f" up to the budget's {s.budget_delta:g}" if s.budget_delta else "") + ")")
        return QueryRejected("this query with delta = 0", f"{what} needs a positive delta", "; or ".join(fixes))

    def plan(self) -> QueryPlan:
        sel = self.norm.core
        for key, value in sel.args.items():
            if value in (None, [], False) or key in _ALLOWED_SELECT_ARGS:
                continue
            if key == "distinct" and sel.args["distinct"].args.get("on"):
                raise QueryRejected("SELECT DISTINCT ON", "not part of the accepted subset",
                                    "SELECT DISTINCT over an aggregate query's rows is")
            raise QueryRejected(*_ARG_NAMES.get(key, (key.upper(), "not part of the accepted subset")))
        for node in sel.find_all(exp.Subquery, exp.Select):
            if node is not sel and not (node.find_ancestor(exp.In, exp.Exists) and node.find_ancestor(exp.Where)):
                clause = next((n for t, n in ((exp.Where, "WHERE"), (exp.Having, "HAVING"), (exp.Order, "ORDER BY"),
                                             (exp.Group, "GROUP BY")) if node.find_ancestor(t)), "SELECT")
                raise refuse_expression(node, clause)
        extra: list[exp.Expression] = []
        self.rel = bind(sel, self.cat, where_conjuncts=extra)
        if self.rel.unit is None:
            raise QueryRejected("this query", "its FROM reads no protected table, but a protected table is "
                                "named elsewhere in it")
        where = self._where(sel, extra)
        self._group(sel)
        outputs = self._select(sel)
        having = self._post(sel.args["having"].this, "HAVING") if sel.args.get("having") else None
        order = self._order(sel)
        limit = self._count_literal(sel.args.get("limit"), "LIMIT")
        offset = self._count_literal(sel.args.get("offset"), "OFFSET") or 0
        if not self.measures and not quantile_measures.plan_quantiles(self) \
                and not distinct_counts.plan_distincts(self):
            raise QueryRejected("a query without aggregates", "dpsql releases only COUNT, SUM and AVG",
                                "add COUNT(*) or another aggregate")
        sa.check(self.measures.values())
        if any(m.kind == "sample" for m in self.measures.values()) and (
                quantile_measures.plan_quantiles(self) or distinct_counts.plan_distincts(self)):
            raise QueryRejected("sample-and-aggregate beside quantiles or COUNT(DISTINCT ...)",
                                "CORR, COVAR_* and REGR_* are answered by their own block rewrite",
                                "ask them in a query of their own")
        wraps = self._wraps(outputs)
        if not wraps and len(self.norm.names) == len(outputs):
            outputs = [Output(n, o.expr, o.noisy, o.text) for n, o in zip(self.norm.names, outputs)]
        return self._finish(outputs, where, having, order, limit, offset, wraps)

    # -- WHERE
    def _where(self, sel: exp.Select, extra: list[exp.Expression]) -> exp.Expression | None:
        where = sel.args.get("where")
        pred = None
        if where is not None:
            semis = SemiJoins(self.rel, self.cat)
            pred = Predicates(tracking(self.resolve), self.engine, semis.handle).check(where.this)
            self.rel = semis.attach(self.rel)
            self.narrow = _narrowing(where.this, self.resolve)
        for cond in extra:
            pred = cond if pred is None else exp.And(this=_paren(pred), expression=_paren(cond))
        return pred

    def _expressions(self, clause: str) -> Expressions:
        # tracking: the columns one expression reads carry at most one explicit collation
        # (predicates.one_collation); separate expressions may each have their own
        resolve = tracking(self.resolve)
        return Expressions(resolve, self.engine, Predicates(resolve, self.engine), clause, self._public_range)

    # -- GROUP BY
    def _group(self, sel: exp.Select) -> None:
        group = sel.args.get("group")
        if not group:
            return
        for arg in ("rollup", "cube", "grouping_sets", "totals", "all"):
            if group.args.get(arg):
                raise QueryRejected(f"GROUP BY {arg.upper().replace('_', ' ')}", "grouping sets are not supported yet",
                                    "ask one GROUP BY query per grouping set (each charged)")
        if not group.expressions:
            raise QueryRejected("an empty GROUP BY", "name the columns to group by")
        for node in group.expressions:
            if isinstance(node, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                what = {exp.Rollup: "ROLLUP", exp.Cube: "CUBE", exp.GroupingSets: "GROUPING SETS"}[type(node)]
                raise QueryRejected(f"GROUP BY {what}", "grouping sets are not supported yet",
                                    "ask one GROUP BY query per grouping set (each charged)")
        for node in group.expressions:
            while isinstance(node, exp.Paren):     # (age > 3) is the key age > 3, as SELECT reads it
                node = node.this
            if not isinstance(node, exp.Column):
                self._group_expression(node)
                continue
            ref, info = self.resolve(node, "GROUP BY")
            if ref in self.rel.unit_class:
                raise QueryRejected("GROUP BY the privacy unit", "every group would hold one person")
            if ref in self.key_refs:
                continue
            if family(info.sql_type) == "other":
                raise QueryRejected(f"GROUP BY {info.name}", "the column's type is not supported for grouping")
            domain, source, null = info.domain, None, False
            inst = self.rel.instance(ref[0])
            if info.public and inst is not None:
                source = (inst.ref, info.name)
                null = any(j.kind == "left" and j.instance.alias == inst.alias for j in self.rel.joins)
                domain = self._public_domain(source, null)
            elif domain is not None and ref in self.narrow:
                # WHERE keeps only some of the domain's values (col = 'x', col IN (...)): the others
                # could only be released as noise. The narrowing is read from the query text.
                keep, drop = self.narrow[ref]
                domain = tuple(v for v in domain if (keep is None or v in keep) and v not in drop)
                if not domain:
                    raise QueryRejected(f"GROUP BY {info.name}", "WHERE keeps none of its public domain's values")

            self.keys.append(GroupKey(f"_g{len(self.keys)}", info.name, domain, exp.column(info.name, table=ref[0]),
                                      info.sql_type, source, null))
            self.key_refs.append(ref)

    def _group_expression(self, node: exp.Expression) -> None:
        """GROUP BY an expression (age / 10 * 10, a CASE, a condition): its derived public domain
        when it is finite and follows from public facts (dpsql.analysis.expressions), else
        thresholded partition selection, as for a column without a domain."""
        d = self._expressions("GROUP BY").derive(node)
        ref = "expr:" + node.sql("postgres")
        if ref in self.key_refs:
            return
        if d.refs & self.rel.unit_class:
            raise QueryRejected("GROUP BY an expression of the privacy unit", "its groups could hold one person each")
        if d.kind not in ("num", "text", "bool", "date", "timestamp"):
            raise QueryRejected("GROUP BY this expression", "group by numbers, texts, dates or conditions")
        domain = d.domain
        if domain is not None and d.kind == "num":
            domain = tuple(int(v) for v in domain) if d.integral else None    # whole numbers print alike everywhere
        if domain is not None and not domain:
            domain = None

        label = node.sql("postgres")
        self.keys.append(GroupKey(f"_g{len(self.keys)}", label, domain, d.sql, d.sql_type,
                                  derived=_describe(d)))
        self.key_refs.append(ref)

    def _public_range(self, ref: ColRef, kind: str = "num") -> tuple | None:
        """[min, max] of a public table's numeric column, read from the engine: public data, read
        when the query is planned (a plan that reads it is not kept). Arithmetic on it then has a
        derived range like a declared column's (TPC-H Q9: ps_supplycost * l_quantity). None where
        the table holds a value that is not a finite number.
        kind="date": a DATE column's first and last dates (EXTRACT(year FROM o_orderdate) as a
        key, TPC-H Q8 and Q9 with supplier as the unit); None where the table holds a date the
        ISO form does not read ('infinity', BC, years past 9999)."""
        inst = self.rel.instance(ref[0])
        if inst is None or inst.kind != "public" or self.domains is None:
            return None
        lo, hi = self.domains(inst.ref, ref[1], "range")
        if kind == "date":
            try:
                span = (_dt.date.fromisoformat(lo), _dt.date.fromisoformat(hi)) if lo is not None else None
            except (TypeError, ValueError):
                return None
            self.public_reads = True
            return span
        try:
            span = (Fraction(lo), Fraction(hi)) if lo is not None else (Fraction(0), Fraction(0))
        except (ValueError, ZeroDivisionError):     # 'NaN', 'Infinity'
            return None
        if max(abs(span[0]), abs(span[1])) > 10 ** 15:
            return None
        self.public_reads = True
        return span

    def _public_domain(self, source: tuple[str, str], null: bool) -> tuple:
        """A public table's column as a key: its values are public, so the key releases each of
        them, read from the public table itself (never from the protected one), as text."""
        if self.domains is None:
            raise QueryRejected("GROUP BY a public table's column", "its values must be read from the engine")
        values = tuple(v for v in self.domains(*source) if v is not None)
        return values + ((None,) if null else ())

    # -- SELECT
    def _select(self, sel: exp.Select) -> list[Output]:
        outputs = []
        for i, item in enumerate(sel.expressions):
            alias = item.alias if isinstance(item, exp.Alias) else None
            node = item.unalias() if isinstance(item, exp.Alias) else item
            expr = self._post(node, "SELECT")
            noisy = expr.noisy()
            if not noisy and not isinstance(expr, Key):
                raise QueryRejected("a constant in SELECT", "select group columns and aggregates")
            name = alias or output_name(node, i)
            outputs.append(Output(name, expr, noisy, node.sql("postgres")))
            if alias:
                if alias.lower() in self.aliases and self.aliases[alias.lower()] != expr:
                    self.alias_twice.add(alias.lower())      # of two different items: ambiguous
                self.aliases[alias.lower()] = expr
        return outputs

    def _post(self, node: exp.Expression, where: str) -> Expr:
        """Compile a post-processing expression over noisy aggregates and keys."""
        if isinstance(node, exp.Paren):
            return self._post(node.this, where)
        if isinstance(node, exp.Alias):
            raise QueryRejected("an alias inside an expression", "alias whole SELECT items only")
        if isinstance(node, exp.Filter):
            if not isinstance(node.this, _AGGREGATES):
                raise refuse_expression(node.this, where)
            cond = Predicates(tracking(self.resolve), self.engine).check(node.expression.this)
            return self._aggregate(node.this, cond)
        if isinstance(node, _AGGREGATES):
            return self._aggregate(node)
        if quantile_measures.is_quantile(node):
            return quantile_measures.aggregate(self, node)
        ref = "expr:" + node.sql("postgres")
        if not isinstance(node, exp.Column) and ref in self.key_refs:
            return Key(self.key_refs.index(ref))
        if isinstance(node, exp.Column):
            if not node.table and node.name.lower() in self.aliases and where != "SELECT":
                if node.name.lower() in self.alias_twice:       # PostgreSQL refuses it too
                    raise QueryRejected(f'{where} "{node.name}"', "it is ambiguous: two outputs have that name",
                                        "give each output its own name with AS, or order by position")
                return self.aliases[node.name.lower()]
            ref, info = self.resolve(node, where)
            if ref not in self.key_refs:
                raise QueryRejected(f"the bare column {info.name!r} in {where}",
                                    "only GROUP BY columns and aggregates can be released",
                                    f"add {info.name} to GROUP BY or aggregate it")
            return Key(self.key_refs.index(ref))
        return _literal_or_op(node, where, lambda n: self._post(n, where))

    def _aggregate(self, node: exp.Expression, cond: exp.Expression | None = None) -> Expr:
        """An aggregate of a column or a row expression, with its own FILTER condition if any."""
        arg = node.this
        fname = node.sql_name()
        suffix = f" FILTER (WHERE {cond.sql('postgres')})" if cond is not None else ""
        if isinstance(node, sa.AGGREGATES):
            return sa.measure(self, node, cond, suffix)
        if node.args.get("expressions") or (isinstance(node, exp.Count) and node.expressions):
            raise QueryRejected(f"{fname} with several arguments", "not part of the accepted subset")
        if isinstance(arg, exp.Distinct):
            if not isinstance(node, exp.Count) or len(arg.expressions) != 1:
                raise QueryRejected(f"{fname}(DISTINCT ...)", "of the DISTINCT aggregates only COUNT(DISTINCT col) "
                                    "is supported yet (its values are taken over each person's bounded rows; "
                                    "the other aggregates do not have that rewrite)",
                                    f"{fname}(col) bounds each person's rows; COUNT(DISTINCT col) counts the values")
            col = arg.expressions[0]
            if not isinstance(col, exp.Column) or self.resolve(col, "COUNT")[0] not in self.rel.unit_class:
                return distinct_counts.aggregate(self, col, cond)     # another column: dpsql.analysis.distinct
            # each unit adds 1 to each group it has a (passing) row in: a count clamped to 1
            return Ref(self._measure("count", None, None, False, f"COUNT(DISTINCT {col.name}){suffix}",
                                         cond, cap=1).name)
        if isinstance(node, exp.Count):
            if isinstance(arg, exp.Star):
                return Ref(self._measure("count", None, None, False, f"COUNT(*){suffix}", cond).name)
            d = self._input(arg, "COUNT")
            return Ref(self._measure("count", d, None, False, f"COUNT({d.label}){suffix}", cond).name)
        d = self._input(arg, fname)
        if not d.bounded:
            raise QueryRejected(f"{fname}({d.label})", "the column has no declared bounds, so one person's "
                                "influence on the result is unbounded",
                                "ask the data owner to declare lower and upper bounds")
        if d.kind != "num":
            raise QueryRejected(f"{fname}({d.label})", "the column is not numeric")
        if isinstance(node, exp.Sum):
            return Ref(self._measure("sum", d, d, False, f"SUM({d.label}){suffix}", cond).name)
        s = self._measure("sum", d, d, True, f"{fname.upper()}({d.label}) centered sum{suffix}", cond)
        c = self._measure("count", d, None, False, f"COUNT({d.label}){suffix}", cond)
        if isinstance(node, exp.Avg):
            return Avg(s.name, c.name, float(s.lo), float(s.hi))
        if max(abs(d.lo), abs(d.hi)) >= VAR_LIMIT:
            # The squared sum adds (2x - (lo + hi))^2 in the engine's 128-bit (or 38-digit) type
            # (dpsql.rewrite.aggregates.row_aggregate): with |lo|, |hi| < 1e17 (and so their
            # scaled integers, dpsql.analysis.bind.exact_bounds), each term is at most 4e34 < 1e38
            # on every row; wider bounds could overflow on some rows (an error oracle).
            raise QueryRejected(f"{fname}({d.label})", f"its bounds reach {float(max(abs(d.lo), abs(d.hi))):g}: the "
                                "squares of values of 1e17 or more could overflow the engine's numbers",
                                "scale the value down, or clamp it with LEAST/GREATEST")
        q = self._measure("sum", d, d, False, f"{fname.upper()}({d.label}) squared sum{suffix}", cond, squared=True)
        sample = isinstance(node, (exp.Variance, exp.Stddev, exp.StddevSamp))
        root = isinstance(node, (exp.Stddev, exp.StddevSamp, exp.StddevPop))
        return Var(s.name, q.name, c.name, float(s.lo), float(s.hi), sample, root)

    def _input(self, arg: exp.Expression, what: str) -> _Input:
        """What an aggregate reads: a declared column (as it is), or a row expression over declared
        columns, clamped and typed so that it cannot fail on any row (dpsql.analysis.expressions)."""
        if isinstance(arg, exp.Column):
            if isinstance(arg.this, exp.Star):
                raise refuse_expression(exp.Star(), what)
            ref, info = self.resolve(arg, what)
            lo = hi = None
            if info.bounded:
                lo, hi = info.range()
            fam = family(info.sql_type)
            kind = "num" if fam in NUMERIC else fam
            return _Input(exp.column(ref[1], table=ref[0]), info.name, ("col", ref), kind, info.sql_type, lo, hi,
                          info.whole_bounds and fam == "int")
        d = self._expressions(what).derive(arg)
        if d.refs & self.rel.unit_class and what != "COUNT":
            raise QueryRejected(f"{what} of an expression of the privacy unit", "the unit is not a value to add up")
        return _Input(d.sql, arg.sql("postgres"), ("expr", arg.sql("postgres")), d.kind, d.sql_type, d.lo, d.hi,
                      d.integral and d.lo is not None and d.lo.denominator == 1 and d.hi.denominator == 1,
                      _describe(d))

    def _measure(self, kind: str, d: _Input | None, bounds: _Input | None, centered: bool, label: str,
                 cond: exp.Expression | None = None, *, squared: bool = False, cap: int | None = None) -> Measure:
        key = (kind, d.key if d is not None else None, centered, squared, cap,
               cond.sql("postgres") if cond is not None else None)
        if key not in self.measures:
            name = f"_v{len(self.measures)}"
            column = d.label if d is not None else None
            if kind == "sum":
                assert bounds is not None and bounds.lo is not None
                lo, hi, scale = exact_bounds(bounds.lo, bounds.hi, bounds.sql_type, bounds.whole)
                m = Measure(name, kind, column, centered, lo, hi, scale, label, d.sql, cond, squared,
                            derived=d.derived,
                            cast_in_bounds=scale != 1 and cast_in_bounds(d.sql_type, lo, hi, scale))
            else:
                m = Measure(name, kind, column, label=label, input=d.sql if d is not None else None, filter=cond,
                            cap=cap, derived=d.derived if d is not None else None)
            self.measures[key] = m
        return self.measures[key]

    # -- ORDER BY, LIMIT
    def _order(self, sel: exp.Select) -> tuple:
        order = sel.args.get("order")
        if not order:
            return ()
        out = []
        for o in order.expressions:
            node = o.this
            if isinstance(node, exp.Literal) and not node.is_string:
                if not node.this.isdigit():
                    raise QueryRejected("ORDER BY a constant", "order by outputs or their positions")
                pos = int(node.this)
                if not 1 <= pos <= len(sel.expressions):
                    raise QueryRejected("ORDER BY position", "it does not name a SELECT item")
                item = sel.expressions[pos - 1]
                expr = self._post(item.unalias() if isinstance(item, exp.Alias) else item, "ORDER BY")
            else:
                expr = self._post(node, "ORDER BY")
            out.append(_ordering(o, expr))
        return tuple(out)

    def _check_work(self, domain_size: int | None, per_group: int, quantiles: int) -> None:
        """[limits] max_released_cells and max_quantile_work (dpsql.policy.Limits), before anything
        is charged: the groups are the public domains' product when every key has one (all are
        released, whatever the LIMIT), else max_released_rows; one group without keys. Facts of the
        query and the policy only."""
        lim = self.policy.limits
        groups = 1 if not self.keys else domain_size if domain_size is not None else lim.max_released_rows
        why = ("the product of its keys' public domains" if self.keys and domain_size is not None else
               "max_released_rows: a key has no public domain" if self.keys else "no GROUP BY")
        cells, work = groups * per_group, groups * quantiles
        if cells > lim.max_released_cells:
            raise QueryRejected("this query", f"it demands {groups} groups ({why}) x {per_group} noisy values = "
                                f"{cells} cells, more than the {lim.max_released_cells} one query may demand "
                                "(the policy's max_released_cells)",
                                "group by fewer or narrower keys, or ask for fewer aggregates")
        if work > lim.max_quantile_work:
            raise QueryRejected("this query", f"it demands {groups} groups ({why}) x {quantiles} quantiles = "
                                f"{work} quantile choices, more than the {lim.max_quantile_work} one query may "
                                "demand (the policy's max_quantile_work)",
                                "group by fewer or narrower keys, or ask for fewer quantiles")

    @staticmethod
    def _count_literal(node: exp.Expression | None, what: str) -> int | None:
        return _count_literal(node, what)

    # -- outer wrapper queries
    def _wraps(self, outputs: list[Output]) -> tuple[Wrap, ...]:
        names = [o.name.lower() for o in outputs]
        out = []
        for w in self.norm.wrappers:
            out.append(_compile_wrap(w, names))
            names = [n.lower() for n, _ in w.outputs]
        return tuple(out)

    # -- finish: split the budget, sensitivities, selection
    def _finish(self, outputs, where, having, order, limit, offset, wraps) -> QueryPlan:
        s, rel = self.settings, self.rel
        bounded = not rel.unit_unique
        rows = rel.rows_per_unit if bounded else 1
        public = all(k.domain is not None for k in self.keys)
        domain_size = math.prod(len(k.domain) for k in self.keys) if public else None
        if domain_size is not None and domain_size > MAX_PUBLIC_GROUPS:
            raise QueryRejected("this GROUP BY", f"its public domains give more than {MAX_PUBLIC_GROUPS} groups")
        most = self.policy.limits.max_released_rows
        final_limit = limit if not wraps else min((w.limit for w in wraps if w.limit is not None), default=limit)
        if domain_size is not None and domain_size > most and (final_limit is None or final_limit > most):
            raise QueryRejected("this GROUP BY", f"its public domains give {domain_size} groups, more than the "
                                f"{most} rows one query may release (the policy's max_released_rows)",
                                f"add LIMIT {most} or fewer, or group by fewer columns")
        if not self.keys or not bounded:
            l0 = 1
        else:
            l0 = rel.groups_per_unit
            if domain_size is not None:
                l0 = min(l0, domain_size)
        group_choice = bounded and bool(self.keys) and (domain_size is None or rel.groups_per_unit < domain_size)
        measures = tuple(self.measures.values())
        quantiles = quantile_measures.plan_quantiles(self)
        distincts = distinct_counts.plan_distincts(self)
        self._check_work(domain_size, len(measures) + len(quantiles) + len(distincts), len(quantiles))
        units_only = bounded and all(m.kind == "count" and m.input is None and m.filter is None
                                     and (rows == 1 or m.cap == 1) for m in measures)
        needs_selection = bool(self.keys) and not public
        parts = len(measures) + len(quantiles) + len(distincts) + (1 if needs_selection else 0)
        eps_part = s.epsilon / parts
        gaussian = s.mechanism != "laplace"
        delta_parts = (len(measures) + len(distincts) if gaussian else 0) + (1 if needs_selection else 0)
        if delta_parts and s.delta <= 0:
            raise self._no_delta(needs_selection, gaussian)
        delta_part = s.delta / delta_parts if delta_parts else 0.0
        noise = []
        for m in measures:
            linf = sens.per_group_bound(m, rows)
            if linf == 0:
                linf = Fraction(1, 10**6)   # a measure that cannot vary; keep the mechanisms well-defined
            noise.append(NoiseSpec(m.name, s.mechanism, sens.l1(linf, l0), sens.l2(linf, l0), float(linf),
                                   eps_part, delta_part if gaussian else 0.0))
        noise += [distinct_counts.noise_spec(dc, s.mechanism, rows, l0, eps_part, delta_part) for dc in distincts]
        noise += [quantile_measures.noise_spec(q, rows, l0, eps_part) for q in quantiles]
        selection = sel_noise = None
        if needs_selection:
            thr = sens.selection_threshold(eps_part, delta_part, l0)
            selection = Selection(eps_part, delta_part, l0, thr)
            sel_noise = NoiseSpec("_units", "laplace", float(l0), math.sqrt(l0), 1.0, eps_part, 0.0)
        cost = Cost(s.epsilon, s.delta if delta_parts else 0.0)
        table = next(iter(rel.policies))
        first = next(i for i in rel.instances if i.protected)
        ids = frozenset(c for t in rel.policies for c in reconstruction.identity_columns(t))
        subset_where = where
        for sj in _all_semis(rel):
            if sj.where is not None:
                subset_where = sj.where if subset_where is None else exp.And(this=_paren(subset_where),
                                                                            expression=_paren(sj.where))
        if subset_where is not None:
            subset_where = _canonical_names(subset_where, rel)
        return QueryPlan(
            text=self.original.sql("postgres", comments=False), table=table, table_ref=first.ref or table.name,
            bounded=bounded, l0=l0, keys=tuple(self.keys), measures=measures, noise=tuple(noise),
            selection=selection, selection_noise=sel_noise, outputs=tuple(outputs), where=where,
            having=having, order=order, limit=limit, offset=offset, cost=cost, mechanism=s.mechanism,
            group_choice=group_choice, domain_size=domain_size, units_only=units_only,
            unit_not_null=rel.unit_not_null, subset=reconstruction.classify(subset_where, ids),
            relation=rel, rows_per_unit=rows, wraps=wraps, names=tuple(self.norm.names), quantiles=quantiles,
            distincts=distincts, public_reads=self.public_reads)


def _canonical_names(where: exp.Expression, rel: Relation) -> exp.Expression:
    """Columns named by their table, not by the query's aliases, for the reconstruction defence's
    population: renaming an alias must not start a new subset series (a way round the cap). A
    query reading one table names columns bare; several tables of one name share a population
    (the stricter reading)."""
    tables: dict[str, str] = {}
    for r in rel.walk():
        for i in r.instances:
            tables[i.alias] = i.policy.name if i.policy is not None else (i.ref or i.alias)
        for sj in r.semi:
            tables[sj.name] = sj.name
    single = len(set(tables.values())) == 1

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table in tables:
            return exp.column(node.name) if single else exp.column(node.name, table=tables[node.table])
        return node
    return where.copy().transform(rename)


@dataclass(frozen=True)
class _Input:
    """An aggregate's input: SQL, a label for people, an identity for deduplication, its kind, SQL
    type and range (whole: integer-typed with whole bounds, summed as itself)."""
    sql: exp.Expression
    label: str
    key: tuple
    kind: str
    sql_type: str
    lo: Fraction | None
    hi: Fraction | None
    whole: bool
    derived: str | None = None

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None


def _describe(d: Derived) -> str:
    """A derived expression's facts for EXPLAIN DP."""
    out = []
    if d.lo is not None and d.hi is not None:
        out.append(f"range [{_num(d.lo)}, {_num(d.hi)}]")
    if d.span is not None:
        out.append(f"dates [{d.span[0]}, {d.span[1]}]")
    if d.domain is not None:
        vals = ", ".join(repr(v) if isinstance(v, (str, bool)) else str(v) if isinstance(v, _dt.date) else _num(v)
                         for v in list(d.domain)[:6])
        out.append(f"domain of {len(d.domain)}: {{{vals}{', ...' if len(d.domain) > 6 else ''}}}")
    return "; ".join(out) or "no bounds"


def _num(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def _narrowing(where: exp.Expression, resolve) -> dict:
    """What the top-level conjuncts of a WHERE say about a column's values: col = lit, lit = col,
    col IN (...) keep only those; col <> lit and col NOT IN (...) drop them. From the query text."""
    out: dict = {}

    def lit(v: exp.Expression):
        if isinstance(v, exp.Literal):
            return v.this if v.is_string else (int(v.this) if v.this.isdigit() else None)
        return None
    for c in _conjuncts(where):
        neg = isinstance(c, exp.Not)
        node = c.this if neg else c
        if isinstance(node, exp.Paren):
            node = node.this
        col, vals, keep = None, None, not neg
        if isinstance(node, (exp.EQ, exp.NEQ)):
            keep = keep == isinstance(node, exp.EQ)
            if isinstance(node.this, exp.Column) and lit(node.expression) is not None:
                col, vals = node.this, [lit(node.expression)]
            elif isinstance(node.expression, exp.Column) and lit(node.this) is not None:
                col, vals = node.expression, [lit(node.this)]
        elif isinstance(node, exp.In) and isinstance(node.this, exp.Column) and not node.args.get("query"):
            items = [lit(v) for v in node.expressions]
            if all(i is not None for i in items):
                col, vals = node.this, items
        if col is None:
            continue
        try:
            ref = resolve(col, "WHERE")[0]
        except QueryRejected:
            continue
        k, d = out.get(ref, (None, frozenset()))
        if keep:
            k = frozenset(vals) if k is None else k & frozenset(vals)
        else:
            d = d | frozenset(vals)
        out[ref] = (k, d)
    return out


def _all_semis(rel: Relation):
    for r in rel.walk():
        yield from r.semi


def _paren(node: exp.Expression) -> exp.Expression:
    return exp.Paren(this=node) if isinstance(node, exp.Or) else node


VAR_LIMIT = 10 ** 17        # |bounds| of a VAR/STDDEV argument (its squares stay below 4e34)


def _ordering(o: exp.Ordered, expr: Expr) -> tuple[Expr, bool, bool]:
    desc = bool(o.args.get("desc"))
    nulls_first = o.args.get("nulls_first")
    return (expr, desc, bool(nulls_first) if nulls_first is not None else desc)


def _count_literal(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    if node.args.get("limit_options") or node.args.get("expressions"):
        raise QueryRejected(f"{what} with PERCENT, WITH TIES or BY", f"{what} takes a whole number of rows")
    value = node.args.get("expression") or node.this
    if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
        raise QueryRejected(f"{what} with a non-literal", f"{what} takes a whole number")
    return int(value.this)


def _literal_or_op(node: exp.Expression, where: str, sub: Callable[[exp.Expression], Expr]) -> Expr:
    """Literals, arithmetic and (outside SELECT) comparisons and logic of post-processing."""
    if isinstance(node, exp.Literal):
        if node.is_string:
            return Lit(node.this)
        if not NUMBER.fullmatch(node.this):
            raise QueryRejected("a malformed number", "write numbers in plain decimal form")
        return Lit(float(node.this))
    if isinstance(node, exp.Boolean):
        return Lit(bool(node.this))
    if isinstance(node, exp.Null):
        return Lit(None)
    if isinstance(node, exp.Neg):
        return Neg(_numeric(sub(node.this)))
    if type(node) in _ARITH:
        return _ARITH[type(node)](_numeric(sub(node.this)), _numeric(sub(node.expression)))
    if where != "SELECT":
        if type(node) in CMP:
            return Cmp(CMP[type(node)], sub(node.this), sub(node.expression))
        if isinstance(node, exp.And):
            return And(sub(node.this), sub(node.expression))
        if isinstance(node, exp.Or):
            return Or(sub(node.this), sub(node.expression))
        if isinstance(node, exp.Not):
            return Not(sub(node.this))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return IsNull(sub(node.this), bool(node.args.get("negate")))
        if isinstance(node, exp.Between):
            v = sub(node.this)
            return And(Cmp(">=", v, sub(node.args["low"])), Cmp("<=", v, sub(node.args["high"])))
    raise refuse_expression(node, where)


def _numeric(expr: Expr) -> Expr:
    """Arithmetic takes noisy aggregates and numeric literals only."""
    if isinstance(expr, Key):
        raise QueryRejected("arithmetic on a GROUP BY column", "arithmetic applies to aggregates and numbers")
    if isinstance(expr, Lit) and (expr.value is None or isinstance(expr.value, (str, bool))):
        raise QueryRejected("arithmetic on a non-number", "arithmetic applies to aggregates and numbers")
    return expr


def _compile_wrap(w: Wrapper, names: list[str]) -> Wrap:
    """An outer query's items, filter and order as expressions over the inner rows' columns
    (Key(i): the inner output at position i): post-processing of released values only. Its
    ORDER BY may also name its own outputs (by alias or position), as PostgreSQL's does."""
    def sub(where: str):
        def compile_(node: exp.Expression) -> Expr:
            if isinstance(node, exp.Paren):
                return compile_(node.this)
            if isinstance(node, exp.Column):
                name = node.name.lower()
                if name not in names:
                    if where == "ORDER BY" and name in own:
                        return outputs[own.index(name)][1]
                    raise QueryRejected(f"the column {node.name!r} of the outer query",
                                        "it is not an output of the query it wraps")
                return Key(names.index(name))
            if where == "ORDER BY" and isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
                pos = int(node.this)
                if not 1 <= pos <= len(outputs):
                    raise QueryRejected("ORDER BY position", "it does not name an output of the outer query")
                return outputs[pos - 1][1]
            if isinstance(node, exp.AggFunc):
                raise QueryRejected("an aggregate in an outer query", "an outer query can only select, filter, "
                                    "order and limit the inner query's rows")
            if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg)):
                raise QueryRejected("arithmetic in an outer query", "do the arithmetic in the inner query")
            return _literal_or_op(node, where, compile_)
        return compile_
    outputs = tuple((name, sub("SELECT")(e)) for name, e in w.outputs)
    own = [name.lower() for name, _ in outputs]
    where = sub("WHERE")(w.where) if w.where is not None else None
    order = tuple(_ordering(o, sub("ORDER BY")(o.this)) for o in w.order)
    return Wrap(outputs, where, order, _count_literal(w.limit, "LIMIT"), _count_literal(w.offset, "OFFSET") or 0)

