"""The analysis of one private query (the subset check and the privacy analysis in one walk; the
entry is dpsql.analysis.analyze.analyze): names and WHERE here, GROUP BY in grouping.py, the
aggregates in aggregates.py, the outputs in outputs.py, the budget split and the plan in budget.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.analysis import distinct as distinct_counts
from dpsql.analysis import quantiles as quantile_measures
from dpsql.analysis import sample_aggregate as sa
from dpsql.analysis.aggregates import Aggregates
from dpsql.analysis.bind import Catalog, bind
from dpsql.analysis.budget import Budget, paren
from dpsql.analysis.expressions import Expressions
from dpsql.analysis.grouping import Grouping
from dpsql.analysis.measures import Measure, SampleAggregate
from dpsql.analysis.normalize import Normalized
from dpsql.analysis.outputs import Outputs
from dpsql.analysis.plan import Expr, GroupKey, Output, QueryPlan
from dpsql.analysis.predicates import Predicates
from dpsql.analysis.scope import resolve_in
from dpsql.analysis.sql import conjuncts
from dpsql.analysis.sqltypes import tracking
from dpsql.analysis.subset import refuse_expression
from dpsql.analysis.relation import ColRef, ColumnInfo
from dpsql.analysis.semijoin import SemiJoins
from dpsql.dialects import dialect as engine_dialect
from dpsql.errors import QueryRejected
from dpsql.policy import Policy

if TYPE_CHECKING:
    from dpsql.analysis.analyze import DomainReader, Schema, Settings

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


class Analysis(Outputs, Aggregates, Grouping, Budget):
    """One private query's analysis: its state, names, WHERE, and the walk that builds the plan."""

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
        ref, info = resolve_in(list(self.rel.instances), col)
        if not info.declared and ref not in self.rel.unit_class:
            inst = self.rel.instance(ref[0])
            owner = inst.policy.name if inst is not None and inst.policy is not None else ref[0]
            raise QueryRejected(f"the column {info.name!r}",
                                f"it is not declared in the policy for table {owner!r}",
                                "ask the data owner to declare it (bounds or a public value domain)")
        return ref, info

    # -- main
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
        if any(isinstance(m, SampleAggregate) for m in self.measures.values()) and (
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
            pred = cond if pred is None else exp.And(this=paren(pred), expression=paren(cond))
        return pred

    def _expressions(self, clause: str) -> Expressions:
        # tracking: the columns one expression reads carry at most one explicit collation
        # (predicates.one_collation); separate expressions may each have their own
        resolve = tracking(self.resolve)
        return Expressions(resolve, self.engine, Predicates(resolve, self.engine), clause, self._public_range)


def _narrowing(where: exp.Expression, resolve) -> dict:
    """What the top-level conjuncts of a WHERE say about a column's values: col = lit, lit = col,
    col IN (...) keep only those; col <> lit and col NOT IN (...) drop them. From the query text."""
    out: dict = {}

    def lit(v: exp.Expression):
        if isinstance(v, exp.Literal):
            return v.this if v.is_string else (int(v.this) if v.this.isdigit() else None)
        return None
    for c in conjuncts(where):
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
