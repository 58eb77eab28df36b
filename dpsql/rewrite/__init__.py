"""Rewrite a QueryPlan into one SELECT that bounds, clips and aggregates in the engine.

The steps, each in its own module:
  partitions   - public-domain key filter; unit count for partition selection
  clip         - per-row clamps to declared bounds, in exact arithmetic
  aggregates   - COUNT/SUM measures, per unit and per group (AVG is already split)
  contribution - per-unit pre-aggregation and salted group choice (or the PK shortcut)

The result reads only the protected table and returns one row per group: the
(unnoised, bounded) measures and, when needed, the distinct-unit count. The bounding
salt is the bound parameter `salt` (contribution.SALT), so the SQL text is stable.
"""
from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel

from dpsql.analysis.plan import QueryPlan
from dpsql.rewrite import contribution
from dpsql.rewrite.contribution import SALT

__all__ = ["rewrite", "to_sql", "SALT"]


def rewrite(plan: QueryPlan, dialect: str = "duckdb") -> exp.Select:
    """The rewritten query as a sqlglot tree."""
    if not plan.bounded:
        return contribution.unique_unit(plan, dialect)
    if plan.units_only:
        special = contribution.units_only(plan, dialect)
        if special is not None:
            return special
    return contribution.bounded(plan, dialect)


def to_sql(plan: QueryPlan, dialect: str = "duckdb") -> str:
    """SQL text for the engine; constructs the dialect cannot express raise.

    The tree is freshly built, so the generator may use it in place (no copy).
    """
    generator = Dialect.get_or_raise(dialect).generator(unsupported_level=ErrorLevel.RAISE, comments=False)
    return generator.generate(rewrite(plan, dialect), copy=False)
