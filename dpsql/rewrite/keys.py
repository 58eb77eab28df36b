"""Pass 5, keys_as_text: every group key comes back as text, `CAST(_g0 AS TEXT) AS _k0`.

Why: the Session receives every candidate group before partition selection decides which are
released, so nothing it does with a key may fail on some value. A cast to text is total on every
engine (DuckDB and Spark print every value; PostgreSQL's output functions print 'infinity', BC
dates, years past 9999 and NUMERIC NaN), and the driver always loads text, where psycopg would
raise on a date it cannot represent. The Session turns text into typed values only for released
keys, and never by a conversion that can fail (dpsql.release.typed_key). On PostgreSQL the cast
also drops CHAR(n)'s padding, so a padded value matches its public domain.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect, data_type


def key_text(i: int, value: exp.Expression) -> exp.Expression:
    return exp.alias_(exp.Cast(this=value, to=data_type("TEXT")), f"_k{i}", copy=False)


def keys_as_text(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    names = {k.name: i for i, k in enumerate(plan.keys)}
    items = []
    for item in tree.expressions:
        if isinstance(item, exp.Column) and item.name in names:
            items.append(key_text(names[item.name], item))
        else:
            items.append(item)
    tree.set("expressions", items)
    return tree
