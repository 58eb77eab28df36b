"""GROUP BY of a private query: each key a column or an expression, with its public domain (declared,
narrowed by WHERE, read from a public table, or derived) or none (thresholded partition selection).
A mixin of dpsql.analysis.private_query.Analysis: it reads self.resolve, self.rel, self.narrow,
self.domains and self._expressions, and fills self.keys and self.key_refs."""
from __future__ import annotations

import datetime as _dt
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.aggregates import describe
from dpsql.analysis.plan import GroupKey
from dpsql.analysis.sqltypes import family
from dpsql.analysis.relation import ColRef
from dpsql.errors import QueryRejected


class Grouping:
    """The GROUP BY keys, and public tables' values and ranges read from the engine."""

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
                                  derived=describe(d)))
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
