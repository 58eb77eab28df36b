"""Semi-joins on the privacy unit in WHERE: per-unit filters.

    unit [NOT] IN (SELECT unit FROM relation WHERE p)
    [NOT] EXISTS (SELECT ... FROM relation WHERE relation.unit = outer.unit AND p)

    [NOT] EXISTS (SELECT ... FROM lineitem WHERE lineitem.l_orderkey = orders.o_orderkey AND p)
    orders.o_orderkey [NOT] IN (SELECT l_orderkey FROM lineitem WHERE p)

Privacy argument: whether a unit passes depends only on that unit's own rows in the inner
relation (the test equates the inner unit with the outer unit, at one type), so the filter is
a function of each unit's rows, like a condition on its own columns; removing one unit's rows
everywhere changes no other unit's outcome, and bounding still applies to the rows that pass.
The same holds through a link key: lineitem's `link = "l_orderkey -> orders.o_orderkey"` makes
each line item's unit the unit of the one order (o_orderkey unique in the engine, checked when
the query runs) whose key it holds. Testing an outer orders row's o_orderkey against the inner
l_orderkey (at one type) reads only line items whose unit is that order's: the outer row's own
unit. So the flag is again a function of the outer row's unit's own rows.
The rewrite evaluates p per row inside an aggregate (COUNT(*) FILTER (WHERE p) per unit), never
as a filter the engine could decide from statistics, like the query's own WHERE.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.analysis.predicates import Predicates
from dpsql.analysis.relation import Relation, SemiJoin
from dpsql.analysis.scope import resolve_in
from dpsql.analysis.sql import and_all, conjuncts
from dpsql.analysis.sqltypes import same_type, tracking
from dpsql.errors import QueryRejected

if TYPE_CHECKING:
    from dpsql.analysis.bind import Catalog


class SemiJoins:
    def __init__(self, rel: Relation, cat: Catalog):
        self.rel, self.cat = rel, cat
        self.found: list[SemiJoin] = []

    def attach(self, rel: Relation) -> Relation:
        return replace(rel, semi=rel.semi + tuple(self.found)) if self.found else rel

    def handle(self, node: exp.Expression) -> exp.Expression:
        outer_aliases = {i.alias for i in self.rel.instances}
        if isinstance(node, exp.In):
            oref, key, rel, conds, extra = self._in(node, outer_aliases)
        elif isinstance(node, exp.Exists):
            oref, key, rel, conds, extra = self._exists(node, outer_aliases)
        else:
            raise QueryRejected("this subquery", "not part of the accepted subset")
        pred = None
        if conds:
            nested = SemiJoins(rel, self.cat)
            check = Predicates(tracking(lambda c, w: resolve_in(list(rel.instances), c)), self.cat.dialect, nested.handle)
            pred = check.check(and_all(conds))
            rel = nested.attach(rel)
        if extra:
            pred = and_all(([pred] if pred is not None else []) + extra)
        name = self.cat.fresh("_s")
        self.found.append(SemiJoin(name, rel, pred, oref, key))
        flag = exp.Coalesce(this=exp.column("_in", table=name), expressions=[exp.Literal.number(0)])
        return exp.GT(this=flag, expression=exp.Literal.number(0))

    def _in(self, node: exp.In, outer_aliases: set[str]) -> tuple:
        """unit IN (SELECT unit ...), or a linked key IN (SELECT link column ...):
        (outer column, inner key or None, inner relation, its own conditions, its row flags)."""
        outer = node.this
        if not isinstance(outer, exp.Column):
            raise QueryRejected("IN (SELECT ...) on an expression", "test the privacy unit: unit IN (SELECT ...)")
        oref, oinfo = resolve_in(list(self.rel.instances), outer)
        sub = node.args["query"]
        inner = sub.this if isinstance(sub, exp.Subquery) else sub
        self._plain(inner)
        if len(inner.expressions) != 1:
            raise QueryRejected("IN (SELECT ...) with several columns", "select the privacy unit alone")
        item = inner.expressions[0]
        col = item.unalias() if isinstance(item, exp.Alias) else item
        conds, correlated = self._split(inner, outer_aliases)
        if correlated:
            raise QueryRejected("a correlated IN subquery", "IN (SELECT ...) must not refer to the outer query",
                                "use EXISTS with the unit equality, or no correlation")
        extra: list[exp.Expression] = []
        rel = self.cat.bind(inner, where_conjuncts=extra)
        if not isinstance(col, exp.Column):
            raise QueryRejected("IN (SELECT expression ...)", "select the privacy unit")
        iref, iinfo = resolve_in(list(rel.instances), col)
        # NOT IN: a row whose unit is NULL, or whose link points nowhere, belongs to nobody and
        # is left out here as everywhere (bind: not_null_unit, the link's INNER join), so the
        # subquery never holds a NULL: NOT IN is NOT EXISTS, whatever the engine's NULLs
        key = self._units(oref, oinfo, iref, iinfo, rel)
        return oref, key, rel, conds, extra

    def _exists(self, node: exp.Exists, outer_aliases: set[str]) -> tuple:
        """EXISTS (SELECT ... WHERE inner.unit = outer.unit AND ...), or through a link key: as _in."""
        inner = node.this
        inner = inner.this if isinstance(inner, exp.Subquery) else inner
        if not isinstance(inner, exp.Select):
            raise QueryRejected("EXISTS", "EXISTS takes one SELECT")
        self._plain(inner)
        conds, correlated = self._split(inner, outer_aliases)
        extra = []
        rel = self.cat.bind(inner, where_conjuncts=extra)
        if len(correlated) != 1:
            raise QueryRejected("this EXISTS subquery", "it must be correlated by exactly one equality of the "
                                "inner and outer privacy units (inner.unit = outer.unit), and by nothing else")
        eq = correlated[0]
        sides = [eq.this, eq.expression] if isinstance(eq, exp.EQ) else []
        if len(sides) != 2 or not all(isinstance(s, exp.Column) for s in sides):
            raise QueryRejected("this EXISTS correlation", "correlate by inner.unit = outer.unit only")
        o, i = (sides[0], sides[1]) if sides[0].table in outer_aliases else (sides[1], sides[0])
        if o.table not in outer_aliases or i.table in outer_aliases:
            raise QueryRejected("this EXISTS correlation", "correlate by inner.unit = outer.unit only")
        oref, oinfo = resolve_in(list(self.rel.instances), o)
        iref, iinfo = resolve_in(list(rel.instances), i)
        key = self._units(oref, oinfo, iref, iinfo, rel)
        return oref, key, rel, conds, extra

    @staticmethod
    def _plain(inner: exp.Select) -> None:
        for key, what in (("group", "GROUP BY"), ("having", "HAVING"), ("distinct", "DISTINCT"),
                          ("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
            if inner.args.get(key):
                raise QueryRejected(f"{what} in a semi-join subquery", "it tests membership of each unit only")
        if any(inner.find_all(exp.AggFunc)):
            raise QueryRejected("an aggregate in a semi-join subquery", "it tests membership of each unit only")

    @staticmethod
    def _split(inner: exp.Select, outer: set[str]) -> tuple[list[exp.Expression], list[exp.Expression]]:
        """The inner WHERE's conjuncts: (its own, those that mention the outer query)."""
        # An inner alias shadows an outer one of the same name (qualify resolved every column to
        # its own scope), so only outer aliases the inner query does not reuse can correlate.
        outer = outer - {t.alias_or_name for t in inner.find_all(exp.Table)}
        where = inner.args.get("where")
        own, corr = [], []
        if where is not None:
            for c in conjuncts(where.this):
                (corr if any(col.table in outer for col in c.find_all(exp.Column)) else own).append(c)
        for item in inner.expressions:
            if any(col.table in outer for col in item.find_all(exp.Column)):
                raise QueryRejected("a correlated subquery", "only the unit equality may refer to the outer query")
        return own, corr

    def _units(self, oref, oinfo, iref, iinfo, rel: Relation):
        """Check the tested columns: both units, or an outer linked key and the inner link column
        that points at it. Returns the inner key column (None: the inner unit)."""
        if rel.unit is None:
            raise QueryRejected("a semi-join on public tables", "only semi-joins on the privacy unit are supported")
        if not same_type(oinfo.sql_type, iinfo.sql_type):
            raise QueryRejected("this semi-join", "the two columns have different types, so matching them "
                                "could convert values")
        if oref in self.rel.unit_class and iref in rel.unit_class:
            return None
        if self._through_link(oref, iref, rel):
            return iref
        if oref not in self.rel.unit_class:
            raise QueryRejected("this semi-join", "it must test the outer query's privacy unit, or a key that the "
                                "subquery's table links to (orders.o_orderkey against lineitem.l_orderkey when "
                                "lineitem's link is l_orderkey -> orders.o_orderkey)")
        raise QueryRejected("this semi-join", "the subquery must select (or correlate on) its privacy unit")

    def _through_link(self, oref, iref, rel: Relation) -> bool:
        """The inner column is a linked table's link column, and the outer column is the linked
        key in the outer query's instance of that very table (whose unit the outer rows have)."""
        inner = rel.instance(iref[0])
        outer = self.rel.instance(oref[0])
        if inner is None or outer is None or inner.kind != "protected" or outer.kind != "protected":
            return False
        link = inner.link
        # binding the inner relation resolved this link, so the engine's uniqueness of the key
        # was checked there (bind._link_unit) and is checked again when the query runs
        return (link is not None and link.column == iref[1] and outer.policy is not None
                and outer.policy.name == link.table and link.key == oref[1])
