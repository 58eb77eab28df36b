"""The privacy policy: TOML file or dict -> frozen, validated Policy.

    model   the frozen model (Policy, TablePolicy, ColumnPolicy, ...) and the defaults
    load    reading and validating a policy: load_policy, policy_problems
    tables  validating [tables.NAME] and [public.types]
    where   problems as 'file: line N: key: problem', and the checks every section uses
    locate  the line of a key in the TOML text (for those messages)
"""
from __future__ import annotations

from dpsql.policy.load import load_policy, policy_problems
from dpsql.policy.locate import locate
from dpsql.policy.model import (
    ACCOUNTANTS,
    AUTH_METHODS,
    DEFAULT_BLOCKS,
    DEFAULT_CACHE_LIFETIME,
    DEFAULT_FLOOR,
    DEFAULT_MAX_CACHED_BYTES,
    DEFAULT_MAX_QUANTILE_WORK,
    DEFAULT_MAX_RELEASED_CELLS,
    DEFAULT_MAX_RELEASED_ROWS,
    DEFAULT_MIN_EPSILON,
    DEFAULT_QUANTUM,
    DEFAULT_SURCHARGE,
    MAX_RELEASED_ROWS_CEILING,
    MAX_WORK_CEILING,
    MECHANISMS,
    SAMPLE_AGGREGATES,
    UNDECLARED,
    Analyst,
    Budget,
    ColumnPolicy,
    Defaults,
    Functions,
    Limits,
    Link,
    Policy,
    Public,
    Reconstruction,
    Server,
    TablePolicy,
    Timing,
    exact,
)

__all__ = [
    "ACCOUNTANTS", "AUTH_METHODS", "DEFAULT_BLOCKS", "DEFAULT_CACHE_LIFETIME", "DEFAULT_FLOOR",
    "DEFAULT_MAX_CACHED_BYTES", "DEFAULT_MAX_QUANTILE_WORK", "DEFAULT_MAX_RELEASED_CELLS", "DEFAULT_MAX_RELEASED_ROWS",
    "DEFAULT_MIN_EPSILON", "DEFAULT_QUANTUM", "DEFAULT_SURCHARGE", "MAX_RELEASED_ROWS_CEILING", "MAX_WORK_CEILING",
    "MECHANISMS", "SAMPLE_AGGREGATES", "UNDECLARED", "Analyst", "Budget", "ColumnPolicy", "Defaults", "Functions",
    "Limits", "Link", "Policy", "Public", "Reconstruction", "Server", "TablePolicy", "Timing", "exact", "load_policy",
    "locate", "policy_problems",
]
