"""Post-processing of released values: HAVING, ORDER BY, LIMIT, outer queries, arithmetic on noisy
aggregates, their 95% half-widths, and the result as the analyst's settings show it.

Everything here runs after the noise, on released values and public parameters only, so it is
post-processing and costs no privacy (Dwork & Roth 2014, Prop. 2.1).

- dpsql.postprocess.expr: the expression nodes (Lit, Ref, Key, Avg, Var, Clamp, Neg, Add, Sub,
  Mul, Div, Cmp, And, Or, Not, IsNull, Win), each with evaluate, interval, vector and refs;
- dpsql.postprocess.simulate: half-widths, by simulation of the noise or interval arithmetic;
- dpsql.postprocess.table: the released Table, finish (SELECT, HAVING, ORDER BY, LIMIT) and wrap
  (outer queries, window functions in an isolated DuckDB);
- dpsql.postprocess.present: rounding and intervals (SET dpsql.round, SET dpsql.intervals).
"""
from __future__ import annotations

from dpsql.postprocess.expr import (
    Add, And, Avg, BinOp, Clamp, Cmp, Div, Expr, IsNull, Key, Lit, Mul, Neg, Not, Or, Ref, Sub, Var, Win,
)
from dpsql.postprocess.present import present
from dpsql.postprocess.simulate import (
    SIM_DRAWS, SIM_MIN_DRAWS, SIM_SEED, draws_for, half_width, noise_draws, simulated_half_width, simulated_half_widths,
)
from dpsql.postprocess.table import CHECK_ROWS, Table, finish, sql_wrap, through, wrap

__all__ = ["Add", "And", "Avg", "BinOp", "CHECK_ROWS", "Clamp", "Cmp", "Div", "Expr", "IsNull", "Key", "Lit", "Mul",
           "Neg", "Not", "Or", "Ref", "SIM_DRAWS", "SIM_MIN_DRAWS", "SIM_SEED", "Sub", "Table", "Var", "Win", "draws_for", "finish",
           "half_width", "noise_draws", "present", "simulated_half_width", "simulated_half_widths", "sql_wrap",
           "through", "wrap"]
