"""Rewrite a QueryPlan into one SELECT that bounds, clips and aggregates in the engine.

The rewrite is a tuple of pure passes over sqlglot trees (as sqlglot's optimizer is), each in
its own module with its argument and an example:

  rows          the joined relation's policy-filtered rows as flat columns (_u, _g*, _x*, _h)
  per_unit      one row per (unit, group): each unit's rows aggregated, WHERE in FILTER
  group_choice  a salted-hash rank of each unit's groups, when it could reach too many
  totals        per group, the sum of the units' clamped contributions (and _units)
  keys_as_text  every key as text, typed only once released
  unique_unit   shortcut: one row per unit (PRIMARY KEY, per-unit subquery): rows only clipped
  units_only    shortcut: counting units (COUNT(DISTINCT), arg-min, DISTINCT ON)
  count_distinct  COUNT(DISTINCT col) of other columns: each unit's values bounded, joined on the keys
  quantiles     each quantile input's per-unit-bounded histogram, joined on the keys (last)

Sample-and-aggregate measures (CORR, COVAR_*, REGR_*) have their own block rewrite
(sample_aggregate.py); beside ordinary measures it is joined to these passes' result on the keys
(sample_aggregate.combined).

The shortcuts apply only when the plan's relation proves their condition. Engine differences
are data (dpsql.dialects); on engines whose LIKE backtracks, row conditions carry a linear RLIKE
instead (like.py). The result reads only the tables of the plan's relation and returns
one row per group: the (unnoised, bounded) measures and, when needed, the distinct-unit count.
The bounding salt is the bound parameter `salt`, so the SQL text is stable.
"""
from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import dialect as engine_dialect
from dpsql.rewrite.count_distinct import count_distinct
from dpsql.rewrite.group_choice import SALT, group_choice
from dpsql.rewrite.keys import keys_as_text
from dpsql.rewrite.per_unit import per_unit
from dpsql.rewrite.quantiles import quantiles
from dpsql.rewrite.rows import rows
from dpsql.rewrite.sample_aggregate import applies as _sample_applies
from dpsql.rewrite.sample_aggregate import combined as _sample_combined
from dpsql.rewrite.totals import totals
from dpsql.rewrite.unique_unit import unique_unit
from dpsql.rewrite.units_only import units_only

__all__ = ["GENERAL", "PASSES", "SALT", "rewrite", "to_sql"]

GENERAL = (rows, per_unit, group_choice, totals, keys_as_text)
PASSES = GENERAL + (unique_unit, units_only, count_distinct, quantiles)


def rewrite(plan: QueryPlan, dialect: str = "duckdb", passes: tuple = PASSES) -> exp.Select:
    """The rewritten query as a sqlglot tree (passes=GENERAL: without the shortcuts)."""
    d = engine_dialect(dialect)
    if _sample_applies(plan):       # sample-and-aggregate: its own block rewrite, joined to the others'
        return _sample_combined(plan, d, lambda sub: _passes(sub, d, passes))
    return _passes(plan, d, passes)


def _passes(plan: QueryPlan, d, passes: tuple) -> exp.Select:
    tree = None
    for p in passes:
        tree = p(tree, plan, d)
    return tree


def to_sql(plan: QueryPlan, dialect: str = "duckdb", *, pretty: bool = False) -> str:
    """SQL text for the engine; constructs the dialect cannot express raise.

    The tree is freshly built, so the generator may use it in place (no copy).
    """
    generator = Dialect.get_or_raise(dialect).generator(unsupported_level=ErrorLevel.RAISE, comments=False,
                                                         pretty=pretty)
    return generator.generate(rewrite(plan, dialect), copy=False)
