"""The privacy policy: TOML file or dict -> frozen, validated Policy.

A policy declares the protected tables, the column that identifies a person (the
privacy unit), how much one person may contribute, each column's bounds or public
value domain, and the analysts' privacy budget. Everything is validated once, here;
every problem is reported with the file, the key and what is wrong.

Names are case-insensitive (stored lower-case), as unquoted SQL identifiers are.
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dpsql.errors import PolicyError

MECHANISMS = ("laplace", "gaussian", "gaussian_classic")

_TOP_KEYS = {"budget", "defaults", "tables"}
_BUDGET_KEYS = {"epsilon", "delta", "ledger"}
_DEFAULT_KEYS = {"epsilon", "delta", "mechanism"}
_TABLE_KEYS = {"privacy_unit", "max_rows_per_unit", "max_groups_per_unit", "columns", "source"}
_COLUMN_KEYS = {"lower", "upper", "values", "identifier"}


class _Where:
    """Formats 'file: key: problem' messages."""

    def __init__(self, source: str):
        self.source = source

    def error(self, key: str, problem: str) -> PolicyError:
        return PolicyError(f"policy {self.source}: {key}: {problem}")


def _number(where: _Where, key: str, value: Any, *, positive: bool = False,
            allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, f"must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise where.error(key, "must be finite")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        raise where.error(key, "must be positive" if not allow_zero else "must not be negative")
    return float(value)


def _count(where: _Where, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise where.error(key, "must be a whole number >= 1")
    if value > 1_000_000:
        raise where.error(key, "must be at most 1000000")
    return int(value)


def _unknown(where: _Where, prefix: str, given: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(given) - allowed)
    if extra:
        raise where.error(f"{prefix}{extra[0]}",
                          f"unknown key (allowed here: {', '.join(sorted(allowed))})")


def _table(where: _Where, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(key, "must be a table")
    return value


@dataclass(frozen=True, slots=True)
class ColumnPolicy:
    """What the policy declares about one column."""
    name: str
    lower: float | None = None
    upper: float | None = None
    values: tuple[Any, ...] | None = None      # public key domain for GROUP BY
    identifier: bool = False                   # identifies units (reconstruction defence)

    @property
    def bounded(self) -> bool:
        return self.lower is not None

    @property
    def is_integral(self) -> bool:
        """Both bounds are whole numbers."""
        return self.bounded and float(self.lower).is_integer() and float(self.upper).is_integer()


@dataclass(frozen=True, slots=True)
class TablePolicy:
    """A protected table: its privacy unit, contribution limits and declared columns."""
    name: str
    privacy_unit: str
    max_rows_per_unit: int = 1
    max_groups_per_unit: int = 1
    columns: Mapping[str, ColumnPolicy] = field(default_factory=dict)
    source: str | None = None

    def column(self, name: str) -> ColumnPolicy | None:
        return self.columns.get(name.lower())

    def declared(self, name: str) -> bool:
        name = name.lower()
        return name == self.privacy_unit or name in self.columns


@dataclass(frozen=True, slots=True)
class Budget:
    """Each analyst's lifetime budget and where spending is recorded."""
    epsilon: float
    delta: float
    ledger: Path | None


@dataclass(frozen=True, slots=True)
class Defaults:
    """Per-query settings an analyst may change with SET."""
    epsilon: float
    delta: float
    mechanism: str


@dataclass(frozen=True, slots=True)
class Policy:
    budget: Budget
    defaults: Defaults
    tables: Mapping[str, TablePolicy]
    source: str = "<dict>"

    def table(self, name: str) -> TablePolicy | None:
        return self.tables.get(name.lower())

    def check_schema(self, table_columns) -> None:
        """Check every protected table and declared column exists in the engine.

        `table_columns(name)` returns {column: type} or raises KeyError for a
        missing table.
        """
        where = _Where(self.source)
        for t in self.tables.values():
            try:
                cols = {c.lower() for c in table_columns(t.source or t.name)}
            except KeyError:
                raise where.error(f"tables.{t.name}", "no such table in the database") from None
            if t.privacy_unit not in cols:
                raise where.error(f"tables.{t.name}.privacy_unit",
                                  f"column {t.privacy_unit!r} is not in the table")
            for c in t.columns:
                if c not in cols:
                    raise where.error(f"tables.{t.name}.columns.{c}", "no such column in the table")


def load_policy(policy: str | os.PathLike | Mapping[str, Any] | Policy) -> Policy:
    """Read a policy from a TOML path, a dict of the same structure, or pass a Policy through."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, Mapping):
        return _build(policy, "<dict>", base=Path.cwd())
    path = Path(policy)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PolicyError(f"policy {path}: cannot read the file: {err.strerror or err}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PolicyError(f"policy {path}: not valid TOML: {err}") from None
    return _build(data, str(path), base=path.resolve().parent)


def _build(data: Mapping[str, Any], source: str, *, base: Path) -> Policy:
    where = _Where(source)
    _unknown(where, "", data, _TOP_KEYS)

    b = _table(where, "budget", data.get("budget", None) or _missing(where, "budget"))
    _unknown(where, "budget.", b, _BUDGET_KEYS)
    if "epsilon" not in b:
        raise where.error("budget.epsilon", "missing: every policy sets each analyst's lifetime epsilon")
    eps = _number(where, "budget.epsilon", b["epsilon"], positive=True, allow_zero=False)
    delta = _number(where, "budget.delta", b.get("delta", 0.0), positive=True)
    if delta >= 1:
        raise where.error("budget.delta", "must be below 1")
    ledger = b.get("ledger")
    if ledger is not None:
        if not isinstance(ledger, (str, os.PathLike)) or not str(ledger):
            raise where.error("budget.ledger", "must be a file path")
        ledger = Path(ledger)
        if not ledger.is_absolute():
            ledger = base / ledger
    budget = Budget(eps, delta, ledger)

    d = _table(where, "defaults", data.get("defaults", {}))
    _unknown(where, "defaults.", d, _DEFAULT_KEYS)
    d_eps = _number(where, "defaults.epsilon", d.get("epsilon", min(0.1, eps)), positive=True,
                    allow_zero=False)
    if d_eps > eps:
        raise where.error("defaults.epsilon", "exceeds the lifetime budget.epsilon")
    d_delta = _number(where, "defaults.delta", d.get("delta", delta / 100), positive=True)
    if d_delta > delta:
        raise where.error("defaults.delta", "exceeds the lifetime budget.delta")
    mech = d.get("mechanism", "laplace")
    if mech not in MECHANISMS:
        raise where.error("defaults.mechanism", f"must be one of {', '.join(MECHANISMS)}")
    if mech != "laplace" and d_delta <= 0:
        raise where.error("defaults.delta", "the Gaussian mechanisms need a positive delta")
    defaults = Defaults(d_eps, d_delta, mech)

    tables: dict[str, TablePolicy] = {}
    for tname, t in _table(where, "tables", data.get("tables", {})).items():
        tp = _table_policy(where, tname, t)
        if tp.name in tables:
            raise where.error(f"tables.{tname}", "declared twice (names are case-insensitive)")
        tables[tp.name] = tp
    return Policy(budget, defaults, tables, source)


def _missing(where: _Where, key: str):
    raise where.error(key, "missing section")


def _table_policy(where: _Where, tname: str, t: Any) -> TablePolicy:
    key = f"tables.{tname}"
    t = _table(where, key, t)
    _unknown(where, key + ".", t, _TABLE_KEYS)
    unit = t.get("privacy_unit")
    if not isinstance(unit, str) or not unit:
        raise where.error(f"{key}.privacy_unit", "missing: name the column that identifies a person")
    rows = _count(where, f"{key}.max_rows_per_unit", t.get("max_rows_per_unit", 1))
    groups = _count(where, f"{key}.max_groups_per_unit", t.get("max_groups_per_unit", 1))
    source = t.get("source")
    if source is not None and (not isinstance(source, str) or not source):
        raise where.error(f"{key}.source", "must be a table name or path")
    columns: dict[str, ColumnPolicy] = {}
    for cname, c in _table(where, f"{key}.columns", t.get("columns", {})).items():
        col = _column_policy(where, f"{key}.columns.{cname}", cname, c)
        if col.name == unit.lower():
            raise where.error(f"{key}.columns.{cname}",
                              "the privacy unit is declared by privacy_unit, not as a column")
        columns[col.name] = col
    return TablePolicy(tname.lower(), unit.lower(), rows, groups, columns, source)


def _column_policy(where: _Where, key: str, cname: str, c: Any) -> ColumnPolicy:
    c = _table(where, key, c)
    _unknown(where, key + ".", c, _COLUMN_KEYS)
    lower, upper = c.get("lower"), c.get("upper")
    if (lower is None) != (upper is None):
        raise where.error(key, "give both lower and upper, or neither")
    if lower is not None:
        lower = _number(where, f"{key}.lower", lower)
        upper = _number(where, f"{key}.upper", upper)
        if not lower <= upper:
            raise where.error(key, "need lower <= upper")
        if max(abs(lower), abs(upper)) > 1e15:
            raise where.error(key, "bounds beyond 1e15 are not supported")
    values = c.get("values")
    if values is not None:
        if not isinstance(values, list) or not values:
            raise where.error(f"{key}.values", "must be a non-empty list")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                raise where.error(f"{key}.values", "entries must be strings or whole numbers")
        if len(set(values)) != len(values):
            raise where.error(f"{key}.values", "has duplicates")
        if len(values) > 100_000:
            raise where.error(f"{key}.values", "at most 100000 values")
        values = tuple(values)
    ident = c.get("identifier", False)
    if not isinstance(ident, bool):
        raise where.error(f"{key}.identifier", "must be true or false")
    return ColumnPolicy(cname.lower(), lower, upper, values, ident)
