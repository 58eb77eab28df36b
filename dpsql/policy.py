"""The privacy policy: TOML file or dict -> frozen, validated Policy.

A policy declares the protected tables, the column that identifies a person (the
privacy unit), how much one person may contribute, each column's bounds or public
value domain, and the analysts' privacy budget. Everything is validated once, here;
every problem is reported with the file, the key and what is wrong.

Names are case-insensitive (stored lower-case), as unquoted SQL identifiers are.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpsql.errors import PolicyError
from dpsql.filetypes import FileTypes, file_type

MECHANISMS = ("laplace", "gaussian", "gaussian_classic")

_TOP_KEYS = {"budget", "defaults", "tables", "reconstruction", "server", "analysts", "public", "limits", "timing",
             "functions"}
_RECON_KEYS = {"surcharge", "max_subset_queries", "cache_lifetime", "audit_log"}
_SERVER_KEYS = {"auth", "tls_cert", "tls_key", "max_message_bytes", "max_concurrent_queries",
                "catalog_timeout", "catalog_max_rows", "max_connections", "max_connections_per_analyst"}
_PUBLIC_KEYS = {"tables", "undeclared", "types"}
UNDECLARED = ("refuse", "public")
_ANALYST_KEYS = {"password", "epsilon", "delta", "accountant"}
AUTH_METHODS = ("scram-sha-256", "trust")
DEFAULT_SURCHARGE = 1.0
DEFAULT_CACHE_LIFETIME = 30 * 86400     # seconds
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_ANALYST_NAME = re.compile(r"^[\w.@+-]{1,128}$")
_BUDGET_KEYS = {"epsilon", "delta", "ledger", "accountant"}
_DEFAULT_KEYS = {"epsilon", "delta", "mechanism", "min_epsilon", "min_rho", "rho"}
ACCOUNTANTS = ("zcdp", "basic")
_TIMING_KEYS = {"quantum", "floor"}
_LIMIT_KEYS = {"max_released_rows", "max_cached_bytes", "max_released_cells", "max_quantile_work"}
DEFAULT_MIN_EPSILON = 0.01
DEFAULT_QUANTUM = 0.05          # seconds
DEFAULT_FLOOR = 0.1             # seconds
DEFAULT_MAX_RELEASED_ROWS = 100_000
DEFAULT_MAX_CACHED_BYTES = 64 * 1024 * 1024
MAX_RELEASED_ROWS_CEILING = 1_000_000
DEFAULT_MAX_RELEASED_CELLS = 2_000_000     # noisy values one query may demand (see Limits)
DEFAULT_MAX_QUANTILE_WORK = 1_000_000       # quantile choices one query may demand (see Limits)
MAX_WORK_CEILING = 10**9
_TABLE_KEYS = {"privacy_unit", "link", "max_rows_per_unit", "max_groups_per_unit", "columns", "source", "types"}
_LINK = re.compile(r"^\s*(\w+)\s*->\s*(\w+)\s*\.\s*(\w+)\s*$")
_COLUMN_KEYS = {"lower", "upper", "values", "identifier", "bounds"}


class _Where:
    """Formats 'file: key: problem' messages; 'file: line N: key: problem' when the TOML
    text is known and the key (or its nearest enclosing table) is found in it."""

    def __init__(self, source: str, text: str | None = None, problems: list[PolicyError] | None = None):
        self.source, self.text, self.problems = source, text, problems

    def error(self, key: str, problem: str) -> PolicyError:
        line = locate(self.text, key) if self.text is not None else None
        at = f"line {line}: " if line is not None else ""
        return PolicyError(f"policy {self.source}: {at}{key}: {problem}")

    def attempt(self, fn, *args, default=None):
        """fn(*args); when collecting problems (`dpsql policy check`), a PolicyError is recorded
        and `default` returned so that the rest of the policy is checked too."""
        if self.problems is None:
            return fn(*args)
        try:
            return fn(*args)
        except PolicyError as err:
            self.problems.append(err)
            return default


def _number(where: _Where, key: str, value: Any, *, positive: bool = False,
            allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, f"must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise where.error(key, "must be finite")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        raise where.error(key, "must be positive" if not allow_zero else "must not be negative")
    return float(value)


def exact(value: float | int) -> Fraction:
    """A policy number as the decimal the user wrote. TOML reads `0.10` as the double nearest to
    it, whose exact binary value is not 1/10 (and has 55 decimal digits); the shortest decimal
    that reads back as the same double (Python's repr) is the number as written, for every
    decimal of up to 15 significant digits. Bounds, clamps and sensitivities use this value, so
    the SQL literal is `0.10`'s exact decimal and a bound of -999.99 is -999.99."""
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(repr(float(value)))


def _count(where: _Where, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise where.error(key, "must be a whole number >= 1")
    if value > 1_000_000:
        raise where.error(key, "must be at most 1000000")
    return int(value)


def _unknown(where: _Where, prefix: str, given: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(given) - allowed)
    for key in extra:       # every one when collecting (policy check), else the first raises
        err = where.error(f"{prefix}{key}", f"unknown key (allowed here: {', '.join(sorted(allowed))})")
        if where.problems is None:
            raise err
        where.problems.append(err)


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
    span: tuple[_dt.date, _dt.date] | None = None   # a DATE or TIMESTAMP column's bounds: dates, or
                                                    # (TIMESTAMP columns only) datetimes without offset
    auto: bool = False          # bounds = "auto": SUM/AVG choose the upper clip privately within
                                # [lower, upper] (dpsql.analysis.auto_bounds)

    @property
    def bounded(self) -> bool:
        return self.lower is not None

    def exact_range(self) -> tuple[Fraction, Fraction]:
        """The numeric bounds as the decimals written in the policy (`exact`)."""
        assert self.lower is not None and self.upper is not None
        return exact(self.lower), exact(self.upper)

    @property
    def is_integral(self) -> bool:
        """Both bounds are whole numbers."""
        return self.bounded and float(self.lower).is_integer() and float(self.upper).is_integer()

    @property
    def timed(self) -> bool:
        """The date bounds include a time of day (only a TIMESTAMP column can take them)."""
        return self.span is not None and any(isinstance(v, _dt.datetime) for v in self.span)

    @property
    def time_span(self) -> tuple[_dt.datetime, _dt.datetime] | None:
        """The bounds as a TIMESTAMP column reads them: a lower date is its first instant
        (00:00:00), an upper date its last (23:59:59.999999), so `upper = 2024-12-31` keeps that day."""
        return _time_span(self.span) if self.span is not None else None


@dataclass(frozen=True, slots=True)
class Link:
    """How a protected table without a unit column finds each row's unit: its `column` holds a
    key of another protected `table`, whose `key` column the engine guarantees unique (checked
    when each query runs), and that row's unit is this row's unit. `link = "visit_id ->
    visits.visit_id"` in the policy."""
    column: str
    table: str
    key: str


@dataclass(frozen=True, slots=True)
class TablePolicy:
    """A protected table: its privacy unit (a column, or a link to another protected table),
    contribution limits and declared columns."""
    name: str
    privacy_unit: str | None
    max_rows_per_unit: int = 1
    max_groups_per_unit: int = 1
    columns: Mapping[str, ColumnPolicy] = field(default_factory=dict)
    source: str | None = None
    link: Link | None = None
    types: FileTypes | None = None      # [tables.NAME.types]: how a table read from a file is typed

    def column(self, name: str) -> ColumnPolicy | None:
        return self.columns.get(name.lower())

    def declared(self, name: str) -> bool:
        name = name.lower()
        return name == self.privacy_unit or name in self.columns


@dataclass(frozen=True, slots=True)
class Budget:
    """Each analyst's lifetime budget, where spending is recorded, and how it is composed.

    accountant: "zcdp" (the default when delta > 0): each query is charged its zero-concentrated
        DP cost rho (and partition selection's delta), and the total must convert to within
        (epsilon, delta); "basic" (the default, and the only choice, when delta = 0): epsilons and
        deltas add up (dpsql.accounting). Fixed per analyst at their first charge (dpsql.ledger)."""
    epsilon: float
    delta: float
    ledger: Path | None
    accountant: str = "zcdp"


@dataclass(frozen=True, slots=True)
class Defaults:
    """Per-query settings an analyst may change with SET.

    min_epsilon: the smallest epsilon one query may use (SET dpsql.epsilon below it is refused).
        Every answer also releases things that are not noised (its run time, whether it
        succeeded); a floor on each query's price bounds how many such probes one budget buys
        (budget.epsilon / min_epsilon), whatever else leaks per probe.
    min_rho: its counterpart under zCDP accounting (default min_epsilon^2 / 2, the rho of one
        pure query at min_epsilon): SET dpsql.rho below it is refused, and every query is charged at
        least this much rho, so a budget buys at most rho_total / min_rho answers.
    rho: per query under zCDP accounting, unless SET (None: each query is calibrated to epsilon
        and delta). Each query's noise is then calibrated to cost this rho (SET dpsql.rho)."""
    epsilon: float
    delta: float
    mechanism: str
    min_epsilon: float = DEFAULT_MIN_EPSILON
    min_rho: float | None = None
    rho: float | None = None

    @property
    def rho_floor(self) -> float:
        return self.min_rho if self.min_rho is not None else self.min_epsilon ** 2 / 2


@dataclass(frozen=True, slots=True)
class Timing:
    """When a private answer is released (dpsql.session.release_delay): not before `floor`
    seconds after the query started, and then only at a whole multiple of `quantum` seconds
    from its start, so that small data-dependent differences in run time vanish. 0 disables each."""
    quantum: float = DEFAULT_QUANTUM
    floor: float = DEFAULT_FLOOR


@dataclass(frozen=True, slots=True)
class Limits:
    """Server resources one query or analyst may take.

    max_released_rows: rows one private query may release. A query whose public domains alone
        give more groups is refused before it is charged; groups released by partition selection
        beyond it are cut (in key order) and the answer says so.
    max_cached_bytes: size of one analyst's answer cache in the ledger; the oldest answers are
        dropped to make room, and an answer larger than it is not cached (a repeat is charged).
    max_released_cells: noisy values one query may demand: its groups times its noisy values per
        group (measures, COUNT(DISTINCT)s and quantiles). max_quantile_work: its groups times its
        quantile items (each an exponential-mechanism choice over a histogram). Both are checked
        when the query is planned, before anything is charged, with the groups counted as the
        public domains' product when every key has one (all of them are released, whatever the
        LIMIT), else as max_released_rows (groups past it are released only when HAVING, ORDER
        BY or an outer query need them, and then how many depends on the data). Measured on 2
        cores (benchmarks/results/heavy_query.md): the release about 0.15 s per 100,000 noisy
        values and 0.2 s per 100,000 quantile choices; a whole query about 0.8 s per 100,000
        released rows (post-processing is per row). The defaults keep one query's own work to a
        few seconds."""
    max_released_rows: int = DEFAULT_MAX_RELEASED_ROWS
    max_cached_bytes: int = DEFAULT_MAX_CACHED_BYTES
    max_released_cells: int = DEFAULT_MAX_RELEASED_CELLS
    max_quantile_work: int = DEFAULT_MAX_QUANTILE_WORK


@dataclass(frozen=True, slots=True)
class Reconstruction:
    """The reconstruction defence's settings (see dpsql.analysis.reconstruction).

    surcharge: a query that selects people by identity is charged (1 + surcharge) times its
        epsilon; never less than in full.
    max_subset_queries: how many such queries one analyst may have answered over one population;
        None = derived from the population the queries name (reconstruction.auto_cap).
    cache_lifetime: seconds an identical repeat is answered from the cache, free and unchanged.
    audit_log: JSON-lines file of flagged queries, surcharges and refusals (None: beside the ledger).
    """
    surcharge: float = DEFAULT_SURCHARGE
    max_subset_queries: int | None = None
    cache_lifetime: float = DEFAULT_CACHE_LIFETIME
    audit_log: Path | None = None


@dataclass(frozen=True, slots=True)
class Server:
    """How `dpsql serve` admits clients: `scram-sha-256` (passwords from [analysts.NAME]) or `trust`
    (any user name, loopback only); TLS when both a certificate and a key are given."""
    auth: str = "scram-sha-256"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_message_bytes: int = 16 * 1024 * 1024
    max_concurrent_queries: int = 4     # per analyst, over all their connections
    catalog_timeout: float = 5.0        # seconds one emulated-catalog query may run
    catalog_max_rows: int = 10_000      # rows one emulated-catalog query may return
    max_connections: int = 64           # sessions open at once, all analysts (each holds an engine connection)
    max_connections_per_analyst: int = 16


@dataclass(frozen=True, slots=True)
class Public:
    """Tables an analyst may read row by row. Fail closed: a table the policy neither protects
    nor lists here is refused, unless the policy says `undeclared = "public"` (the old, open
    behaviour, which `dpsql policy check` warns about)."""
    tables: frozenset[str] = frozenset()
    undeclared: str = "refuse"
    types: Mapping[str, FileTypes] = field(default_factory=dict)   # [public.types.NAME], for file tables


@dataclass(frozen=True, slots=True)
class Analyst:
    """One analyst's entry: a SCRAM verifier for the proxy and, optionally, an own budget."""
    name: str
    password: str | None = None          # 'SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>'
    epsilon: float | None = None
    delta: float | None = None
    accountant: str | None = None


SAMPLE_AGGREGATES = ("corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept")
_FUNCTION_KEYS = {"sample_aggregate", "blocks"} | set(SAMPLE_AGGREGATES)
DEFAULT_BLOCKS = 16


@dataclass(frozen=True, slots=True)
class Functions:
    """[functions]: the engine aggregates the data owner allows through sample-and-aggregate
    (dpsql.analysis.sample_aggregate), the number of blocks k, and the output ranges of those
    with no derived range (REGR_SLOPE, REGR_INTERCEPT: `regr_slope = { lower = -10, upper = 10 }`).
    Nothing is allowed unless listed."""
    sample_aggregate: frozenset[str] = frozenset()
    blocks: int = DEFAULT_BLOCKS
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Policy:
    budget: Budget
    defaults: Defaults
    tables: Mapping[str, TablePolicy]
    source: str = "<dict>"
    reconstruction: Reconstruction = field(default_factory=Reconstruction)
    server: Server = field(default_factory=Server)
    analysts: Mapping[str, Analyst] = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)
    limits: Limits = field(default_factory=Limits)
    public: Public = field(default_factory=Public)
    accountant_explicit: bool = False   # [budget] accountant was set (else it follows each delta)
    functions: Functions = field(default_factory=Functions)
    text: str | None = field(default=None, repr=False, compare=False)   # the TOML, for line numbers

    def problem(self, key: str, problem: str) -> PolicyError:
        """A PolicyError about `key`, with its line in the policy file where it is found."""
        return _Where(self.source, self.text).error(key, problem)

    def is_public(self, name: str) -> bool:
        """May an analyst read this table (lower-case name, optionally schema-qualified) row by
        row? Only if it is not protected (by name or as a protected table's source) and the
        policy lists it under [public] tables or opens every undeclared table."""
        name = name.lower()
        short = name.rsplit(".", 1)[-1]
        for t in self.tables.values():      # by the last name part: errs towards protected
            if short in (t.name, (t.source or t.name).lower().rsplit(".", 1)[-1]):
                return False
        if name in self.public.tables or short in self.public.tables:
            return True
        return self.public.undeclared == "public"

    def table(self, name: str) -> TablePolicy | None:
        return self.tables.get(name.lower())

    def file_types(self) -> dict[str, FileTypes]:
        """The declared column types of every table the policy names, keyed by what the engine
        reads: a protected table's `source` (as written) or name, a public table's name. The
        engine reads a table it loads from a file with these types (dpsql.engines.duckdb)."""
        out = {name: types for name, types in self.public.types.items()}
        for t in self.tables.values():
            if t.types is not None:
                out[t.source or t.name] = t.types
        return out

    def budget_for(self, analyst: str) -> Budget:
        """The analyst's lifetime budget: their [analysts.NAME] epsilon/delta/accountant where set,
        else [budget]'s (whose accountant, when not set, is "zcdp" unless the delta is 0)."""
        a = self.analysts.get(analyst)
        if a is None:
            return self.budget
        delta = self.budget.delta if a.delta is None else a.delta
        if a.accountant is not None:
            accountant = a.accountant
        elif self.accountant_explicit:
            accountant = self.budget.accountant
        else:
            accountant = _default_accountant(delta)
        return Budget(self.budget.epsilon if a.epsilon is None else a.epsilon, delta, self.budget.ledger,
                      accountant)

    def check_schema(self, table_columns, problems: list[PolicyError] | None = None) -> None:
        """Check every protected table and declared column exists in the engine; each error
        names its line in the policy file. With `problems`, every mismatch is appended there
        instead of raising the first.

        `table_columns(name)` returns {column: type} or raises KeyError for a
        missing table.
        """
        where = _Where(self.source, self.text, problems)

        def fail(key: str, problem: str) -> None:
            raise where.error(key, problem)

        def columns(name: str) -> set[str] | None:
            try:
                return {c.lower() for c in table_columns(name)}
            except KeyError:
                return None

        for t in self.tables.values():
            cols = columns(t.source or t.name)
            if cols is None:
                where.attempt(fail, f"tables.{t.name}", "no such table in the database")
                continue
            if t.privacy_unit is not None and t.privacy_unit not in cols:
                where.attempt(fail, f"tables.{t.name}.privacy_unit", f"column {t.privacy_unit!r} is not in the table")
            if t.link is not None:
                if t.link.column not in cols:
                    where.attempt(fail, f"tables.{t.name}.link", f"column {t.link.column!r} is not in the table")
                target = self.tables[t.link.table]
                if t.link.key not in (columns(target.source or target.name) or set()):
                    where.attempt(fail, f"tables.{t.name}.link", f"column {t.link.key!r} is not in {target.name!r}")
            for c in t.columns:
                if c not in cols:
                    where.attempt(fail, f"tables.{t.name}.columns.{c}", "no such column in the table")


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
        raise PolicyError(f"policy {path}: {_toml_error(err)}") from None
    return _build(data, str(path), base=path.resolve().parent, text=text)


def policy_problems(path: str | os.PathLike) -> tuple[Policy | None, list[PolicyError]]:
    """Every problem of a policy file (each with its line where the key is found), not only the
    first: the Policy when there is none. A file that is not valid TOML has one problem, at
    tomllib's line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        return None, [PolicyError(f"policy {path}: cannot read the file: {err.strerror or err}")]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        return None, [PolicyError(f"policy {path}: {_toml_error(err)}")]
    problems: list[PolicyError] = []
    pol = _build(data, str(path), base=path.resolve().parent, text=text, problems=problems)
    problems.sort(key=_line_of)
    return (None, problems) if problems else (pol, [])


def _line_of(err: PolicyError) -> int:
    m = re.search(r": line (\d+): ", str(err))
    return int(m.group(1)) if m else 0


def _toml_error(err: tomllib.TOMLDecodeError) -> str:
    """'line N: not valid TOML: problem (column C)' from tomllib's '... (at line N, column C)'."""
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)\s*$", str(err))
    if m is None:
        return f"not valid TOML: {err}"
    return f"line {m.group(1)}: not valid TOML: {str(err)[:m.start()]} (column {m.group(2)})"


def _build(data: Mapping[str, Any], source: str, *, base: Path, text: str | None = None,
           problems: list[PolicyError] | None = None) -> Policy | None:
    """The Policy of parsed TOML. Without `problems`, the first problem raises; with it (`dpsql
    policy check`), every section, table and column is checked, each problem is appended there,
    and None is returned if there was any."""
    where = _Where(source, text, problems)
    where.attempt(_unknown, where, "", data, _TOP_KEYS)
    budget = where.attempt(_budget, where, data, base)
    defaults = where.attempt(_defaults, where, data, budget) if budget is not None else None
    accountant = budget is not None and isinstance(data.get("budget"), Mapping) and \
        data["budget"].get("accountant") is not None

    tables: dict[str, TablePolicy] = {}
    declared = where.attempt(_table, where, "tables", data.get("tables", {}), default={})
    for tname, t in declared.items():
        tp = where.attempt(_table_policy, where, tname, t)
        if tp is None:
            continue
        if tp.name in tables:
            where.attempt(_fail, where, f"tables.{tname}", "declared twice (names are case-insensitive)")
            continue
        tables[tp.name] = tp
    where.attempt(_check_links, where, tables, {str(n).lower() for n in declared})
    where.attempt(_check_shared_types, where, tables)
    recon = where.attempt(_reconstruction, where, data.get("reconstruction", {}), base)
    server = where.attempt(_server, where, data.get("server", {}), base)
    analysts = where.attempt(_analysts, where, data.get("analysts", {}), defaults, budget, accountant) \
        if defaults is not None else None
    timing = where.attempt(_timing, where, data.get("timing", {}))
    limits = where.attempt(_limits, where, data.get("limits", {}))
    public = where.attempt(_public, where, data.get("public", {}), tables)
    functions = where.attempt(_functions, where, data.get("functions", {}))
    if problems:
        return None
    return Policy(budget, defaults, tables, source, recon, server, analysts, timing=timing, limits=limits,
                  public=public, accountant_explicit=accountant, functions=functions, text=text)


def _fail(where: _Where, key: str, problem: str) -> None:
    raise where.error(key, problem)


def _budget(where: _Where, data: Mapping[str, Any], base: Path) -> Budget:
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
    accountant = b.get("accountant")
    if accountant is not None:
        _check_accountant(where, "budget.accountant", accountant, delta)
    return Budget(eps, delta, ledger, accountant or _default_accountant(delta))


def _defaults(where: _Where, data: Mapping[str, Any], budget: Budget) -> Defaults:
    eps, delta = budget.epsilon, budget.delta
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
    min_eps = _number(where, "defaults.min_epsilon", d.get("min_epsilon", min(DEFAULT_MIN_EPSILON, d_eps)),
                      positive=True, allow_zero=False)
    if min_eps > d_eps:
        raise where.error("defaults.min_epsilon", "exceeds defaults.epsilon")
    min_rho = d.get("min_rho")
    if min_rho is not None:
        min_rho = _number(where, "defaults.min_rho", min_rho, positive=True, allow_zero=False)
    d_rho = d.get("rho")
    if d_rho is not None:
        d_rho = _number(where, "defaults.rho", d_rho, positive=True, allow_zero=False)
        if d_rho < (min_rho if min_rho is not None else min_eps ** 2 / 2):
            raise where.error("defaults.rho", "is below defaults.min_rho (by default min_epsilon^2 / 2)")
        if budget.accountant != "zcdp":
            raise where.error("defaults.rho", "needs zcdp accounting (budget.accountant; a budget delta > 0)")
    return Defaults(d_eps, d_delta, mech, min_eps, min_rho, d_rho)


def _functions(where: _Where, f: Any) -> Functions:
    f = _table(where, "functions", f)
    _unknown(where, "functions.", f, _FUNCTION_KEYS)
    names = f.get("sample_aggregate", [])
    if not isinstance(names, list) or any(not isinstance(n, str) for n in names):
        raise where.error("functions.sample_aggregate", "must be a list of function names")
    names = [n.lower() for n in names]
    for n in names:
        if n not in SAMPLE_AGGREGATES:
            raise where.error("functions.sample_aggregate", f"must name functions among {', '.join(SAMPLE_AGGREGATES)}")
    blocks = f.get("blocks", DEFAULT_BLOCKS)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 2 <= blocks <= 1024:
        raise where.error("functions.blocks", "must be a whole number from 2 to 1024")
    ranges = {}
    for n in SAMPLE_AGGREGATES:
        if n in f:
            r = _table(where, f"functions.{n}", f[n])
            _unknown(where, f"functions.{n}.", r, {"lower", "upper"})
            if "lower" not in r or "upper" not in r:
                raise where.error(f"functions.{n}", "give both lower and upper")
            lo = _number(where, f"functions.{n}.lower", r["lower"])
            hi = _number(where, f"functions.{n}.upper", r["upper"])
            if not lo < hi:
                raise where.error(f"functions.{n}", "need lower < upper")
            if max(abs(lo), abs(hi)) > 1e15:
                raise where.error(f"functions.{n}", "bounds beyond 1e15 are not supported")
            ranges[n] = (lo, hi)
    return Functions(frozenset(names), blocks, ranges)


def _default_accountant(delta: float) -> str:
    """zCDP accounting needs a delta to convert to; a pure epsilon budget keeps basic composition."""
    return "zcdp" if delta > 0 else "basic"


def _check_accountant(where: _Where, key: str, value: Any, delta: float) -> None:
    if value not in ACCOUNTANTS:
        raise where.error(key, f"must be one of {', '.join(ACCOUNTANTS)}")
    if value == "zcdp" and delta <= 0:
        raise where.error(key, "zcdp accounting needs a budget delta > 0 (a rho-zCDP total is never "
                          "(epsilon, 0)-DP); use \"basic\" for a pure epsilon budget")


def _path(where: _Where, key: str, value: Any, base: Path) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise where.error(key, "must be a file path")
    path = Path(value)
    return path if path.is_absolute() else base / path


def _duration(where: _Where, key: str, value: Any) -> float:
    """Seconds, from a number or a text like '90s', '12h', '30d', '2w'."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m is None:
            raise where.error(key, "must be seconds or a duration such as '12h', '30d' or '2w'")
        return float(m.group(1)) * _UNITS[m.group(2)]
    return _number(where, key, value, positive=True)


def _reconstruction(where: _Where, r: Any, base: Path) -> Reconstruction:
    r = _table(where, "reconstruction", r)
    _unknown(where, "reconstruction.", r, _RECON_KEYS)
    surcharge = _number(where, "reconstruction.surcharge", r.get("surcharge", DEFAULT_SURCHARGE), positive=True)
    cap = r.get("max_subset_queries", "auto")
    if cap == "auto":
        cap = None
    elif isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise where.error("reconstruction.max_subset_queries", "must be \"auto\" or a whole number >= 0")
    lifetime = _duration(where, "reconstruction.cache_lifetime", r.get("cache_lifetime", DEFAULT_CACHE_LIFETIME))
    audit = r.get("audit_log")
    audit = _path(where, "reconstruction.audit_log", audit, base) if audit is not None else None
    return Reconstruction(surcharge, cap, lifetime, audit)


def _timing(where: _Where, t: Any) -> Timing:
    t = _table(where, "timing", t)
    _unknown(where, "timing.", t, _TIMING_KEYS)
    quantum = _duration(where, "timing.quantum", t.get("quantum", DEFAULT_QUANTUM))
    floor = _duration(where, "timing.floor", t.get("floor", DEFAULT_FLOOR))
    if quantum > 60 or floor > 600:
        raise where.error("timing", "quantum is at most 60 s and floor at most 600 s")
    return Timing(quantum, floor)


def _limits(where: _Where, lim: Any) -> Limits:
    lim = _table(where, "limits", lim)
    _unknown(where, "limits.", lim, _LIMIT_KEYS)
    rows = lim.get("max_released_rows", DEFAULT_MAX_RELEASED_ROWS)
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_RELEASED_ROWS_CEILING:
        raise where.error("limits.max_released_rows", f"must be a whole number from 1 to {MAX_RELEASED_ROWS_CEILING}")
    size = lim.get("max_cached_bytes", DEFAULT_MAX_CACHED_BYTES)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= 1 << 40:
        raise where.error("limits.max_cached_bytes", "must be a whole number of bytes from 0 (no cache) to 2**40")
    work = []
    for name, default in (("max_released_cells", DEFAULT_MAX_RELEASED_CELLS),
                          ("max_quantile_work", DEFAULT_MAX_QUANTILE_WORK)):
        n = lim.get(name, default)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_WORK_CEILING:
            raise where.error(f"limits.{name}", f"must be a whole number from 1 to {MAX_WORK_CEILING}")
        work.append(n)
    return Limits(rows, size, *work)


def _server(where: _Where, s: Any, base: Path) -> Server:
    s = _table(where, "server", s)
    _unknown(where, "server.", s, _SERVER_KEYS)
    auth = s.get("auth", "scram-sha-256")
    if auth not in AUTH_METHODS:
        raise where.error("server.auth", f"must be one of {', '.join(AUTH_METHODS)}")
    cert, key = s.get("tls_cert"), s.get("tls_key")
    if (cert is None) != (key is None):
        raise where.error("server.tls_cert" if cert is None else "server.tls_key",
                          "give both tls_cert and tls_key, or neither")
    cert = _path(where, "server.tls_cert", cert, base) if cert is not None else None
    key = _path(where, "server.tls_key", key, base) if key is not None else None
    size = s.get("max_message_bytes", 16 * 1024 * 1024)
    if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size <= 1 << 30:
        raise where.error("server.max_message_bytes", "must be a whole number from 1024 to 1073741824")
    conc = s.get("max_concurrent_queries", 4)
    if isinstance(conc, bool) or not isinstance(conc, int) or not 1 <= conc <= 1024:
        raise where.error("server.max_concurrent_queries", "must be a whole number from 1 to 1024")
    timeout = _duration(where, "server.catalog_timeout", s.get("catalog_timeout", 5.0))
    if not 0 < timeout <= 3600:
        raise where.error("server.catalog_timeout", "must be more than 0 and at most 3600 seconds")
    cat_rows = s.get("catalog_max_rows", 10_000)
    if isinstance(cat_rows, bool) or not isinstance(cat_rows, int) or not 1 <= cat_rows <= 10_000_000:
        raise where.error("server.catalog_max_rows", "must be a whole number from 1 to 10000000")
    conns = s.get("max_connections", 64)
    if isinstance(conns, bool) or not isinstance(conns, int) or not 1 <= conns <= 100_000:
        raise where.error("server.max_connections", "must be a whole number from 1 to 100000")
    own = s.get("max_connections_per_analyst", min(16, conns))
    if isinstance(own, bool) or not isinstance(own, int) or not 1 <= own <= conns:
        raise where.error("server.max_connections_per_analyst",
                          f"must be a whole number from 1 to max_connections ({conns})")
    return Server(auth, cert, key, size, conc, timeout, cat_rows, conns, own)


def _public(where: _Where, p: Any, tables: Mapping[str, TablePolicy]) -> Public:
    p = _table(where, "public", p)
    _unknown(where, "public.", p, _PUBLIC_KEYS)
    names = p.get("tables", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise where.error("public.tables", "must be a list of table names")
    out = frozenset(n.strip().lower() for n in names)
    for n in sorted(out):
        if n in tables or any(t.source and n == t.source.lower() for t in tables.values()):
            raise where.error("public.tables", f"{n!r} is a protected table; it cannot also be public")
    undeclared = p.get("undeclared", "refuse")
    if undeclared not in UNDECLARED:
        raise where.error("public.undeclared", "must be \"refuse\" (the default: a table the policy does not "
                          "mention is refused) or \"public\" (every such table is readable row by row)")
    types = {}
    for n, cols in _table(where, "public.types", p.get("types", {})).items():
        if n.lower() in tables:
            raise where.error(f"public.types.{n}", f"{n.lower()!r} is a protected table: declare its types under "
                              f"[tables.{n.lower()}.types]")
        types[n.strip().lower()] = _types(where, f"public.types.{n}", cols)
    return Public(out, undeclared, types)


def _analysts(where: _Where, a: Any, defaults: Defaults, budget: Budget, explicit: bool) -> dict[str, Analyst]:
    out: dict[str, Analyst] = {}
    for name, entry in _table(where, "analysts", a).items():
        key = f"analysts.{name}"
        if not _ANALYST_NAME.match(name):
            raise where.error(key, "an analyst name has 1-128 letters, digits or . _ @ + -")
        entry = _table(where, key, entry)
        _unknown(where, key + ".", entry, _ANALYST_KEYS)
        password = entry.get("password")
        if password is not None and (not isinstance(password, str)
                                     or not re.fullmatch(r"SCRAM-SHA-256\$\d+:[A-Za-z0-9+/=]+\$"
                                                         r"[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+", password)):
            raise where.error(f"{key}.password", "must be a SCRAM-SHA-256 verifier "
                              "(`dpsql passwd NAME` prints one), never a plain-text password")
        eps = entry.get("epsilon")
        if eps is not None:
            eps = _number(where, f"{key}.epsilon", eps, positive=True, allow_zero=False)
            if defaults.epsilon > eps:
                raise where.error(f"{key}.epsilon", "is below defaults.epsilon")
        delta = entry.get("delta")
        if delta is not None:
            delta = _number(where, f"{key}.delta", delta, positive=True)
            if delta >= 1:
                raise where.error(f"{key}.delta", "must be below 1")
        accountant = entry.get("accountant")
        own_delta = budget.delta if delta is None else delta
        if accountant is not None:
            _check_accountant(where, f"{key}.accountant", accountant, own_delta)
        elif explicit and budget.accountant == "zcdp" and own_delta <= 0:
            raise where.error(f"{key}.delta", "is 0, but budget.accountant is zcdp, which needs a delta > 0; "
                              "set this analyst's accountant = \"basic\"")
        out[name] = Analyst(name, password, eps, delta, accountant)
    return out


def _missing(where: _Where, key: str):
    raise where.error(key, "missing section")


def _table_policy(where: _Where, tname: str, t: Any) -> TablePolicy:
    key = f"tables.{tname}"
    t = _table(where, key, t)
    _unknown(where, key + ".", t, _TABLE_KEYS)
    unit, link = t.get("privacy_unit"), t.get("link")
    if link is not None:
        m = _LINK.match(link) if isinstance(link, str) else None
        if m is None:
            raise where.error(f"{key}.link", "must look like \"column -> table.key\": this table's column "
                              "holding a key of another protected table")
        if unit is not None:
            raise where.error(f"{key}.link", "give privacy_unit or link, not both")
        link = Link(m.group(1).lower(), m.group(2).lower(), m.group(3).lower())
    elif not isinstance(unit, str) or not unit:
        raise where.error(f"{key}.privacy_unit", "missing: name the column that identifies a person "
                          "(or a link to another protected table: link = \"column -> table.key\")")
    rows = where.attempt(_count, where, f"{key}.max_rows_per_unit", t.get("max_rows_per_unit", 1), default=1)
    groups = where.attempt(_count, where, f"{key}.max_groups_per_unit", t.get("max_groups_per_unit", 1), default=1)
    source = t.get("source")
    if source is not None and (not isinstance(source, str) or not source):
        raise where.error(f"{key}.source", "must be a table name or path")
    columns: dict[str, ColumnPolicy] = {}
    for cname, c in _table(where, f"{key}.columns", t.get("columns", {})).items():
        col = where.attempt(_column_policy, where, f"{key}.columns.{cname}", cname, c)
        if col is None:
            continue        # recorded (policy check); the table's other columns are still checked
        if unit is not None and col.name == unit.lower():
            raise where.error(f"{key}.columns.{cname}",
                              "the privacy unit is declared by privacy_unit, not as a column")
        if link is not None and col.name == link.column:
            raise where.error(f"{key}.columns.{cname}", "the link column is declared by link, not as a column")
        columns[col.name] = col
    types = where.attempt(_types, where, f"{key}.types", t["types"]) if "types" in t else None
    return TablePolicy(tname.lower(), unit.lower() if unit is not None else None, rows, groups, columns, source,
                       link, types)


def _check_shared_types(where: _Where, tables: Mapping[str, TablePolicy]) -> None:
    """Tables read from one source are one loaded table: their declared types must agree."""
    seen: dict[str, TablePolicy] = {}
    for t in tables.values():
        if t.types is None:
            continue
        other = seen.setdefault(t.source or t.name, t)
        if other.types != t.types:
            raise where.error(f"tables.{t.name}.types", f"differ from tables.{other.name}.types, which reads the same "
                              "source: one source is loaded once, with one set of types")


def _check_links(where: _Where, tables: Mapping[str, TablePolicy], declared: set[str] = frozenset()) -> None:
    """Every link names another protected table, and following links ends at a unit column.
    A link to a table that is `declared` but was not built (its own problem is reported) is
    not reported again."""
    for t in tables.values():
        seen, cur = {t.name}, t
        while cur.link is not None:
            target = tables.get(cur.link.table)
            if target is None and cur.link.table in declared:
                break
            if target is None:
                raise where.error(f"tables.{cur.name}.link", f"{cur.link.table!r} is not a protected table")
            if target.name in seen:
                raise where.error(f"tables.{t.name}.link", "links go round in a circle")
            seen.add(target.name)
            cur = target


def _column_policy(where: _Where, key: str, cname: str, c: Any) -> ColumnPolicy:
    c = _table(where, key, c)
    _unknown(where, key + ".", c, _COLUMN_KEYS)
    lower, upper = c.get("lower"), c.get("upper")
    if (lower is None) != (upper is None):
        raise where.error(key, "give both lower and upper, or neither")
    span = None
    if lower is not None and (_date_like(lower) or _date_like(upper)):
        span = (_date(where, f"{key}.lower", lower), _date(where, f"{key}.upper", upper))
        if not _time_span(span)[0] <= _time_span(span)[1]:
            raise where.error(key, "need lower <= upper")
        lower = upper = None
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
    auto = c.get("bounds")
    if auto is not None:
        if auto != "auto":
            raise where.error(f"{key}.bounds", 'must be "auto"')
        if lower is None:
            raise where.error(f"{key}.bounds", "\"auto\" needs an outer hard range: numeric lower and upper")
    return ColumnPolicy(cname.lower(), lower, upper, values, ident, span, auto is not None)


def _types(where: _Where, key: str, value: Any) -> FileTypes:
    """[tables.NAME.types] / [public.types.NAME]: column = "TYPE" for each column of a table read
    from a file, in the order given; the table is loaded with exactly these columns."""
    value = _table(where, key, value)
    if not value:
        raise where.error(key, "declares no column")
    out: dict[str, str] = {}
    for cname, typ in value.items():
        name = cname.strip().lower()
        if not name:
            raise where.error(key, "a column name is empty")
        if name in out:
            raise where.error(f"{key}.{cname}", "declared twice (names are case-insensitive)")
        canonical = file_type(typ) if isinstance(typ, str) else None
        if canonical is None:
            raise where.error(f"{key}.{cname}", "must be a type name in quotes: BOOLEAN, SMALLINT, INTEGER, BIGINT, "
                              "DOUBLE, DECIMAL(p, s), VARCHAR, DATE, TIMESTAMP, TIMESTAMPTZ, TIME or UUID "
                              "(dpsql.filetypes)")
        out[name] = canonical
    return tuple(out.items())


def _date_like(value: Any) -> bool:
    return isinstance(value, (str, _dt.date))


def _date(where: _Where, key: str, value: Any) -> _dt.date:
    """A DATE or TIMESTAMP column's bound: a TOML date (lower = 2023-01-01) or local date-time
    (lower = 2023-01-01T08:00:00), or the same as an ISO string ("2023-01-01", "2023-01-01 08:00:00",
    up to microseconds). A time with an offset (2023-01-01T08:00:00Z, +02:00) is refused: the bounds
    are wall-clock times of a TIMESTAMP without time zone, and zoned columns are not bounded."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            raise where.error(key, "a time with an offset is not supported: give a local date-time without "
                              "offset (2023-01-01T08:00:00) for a TIMESTAMP column (without time zone)")
        return value
    if isinstance(value, _dt.date):
        return value
    if isinstance(value, str):
        try:
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
                return _dt.date.fromisoformat(value)
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?", value):
                return _dt.datetime.fromisoformat(value.replace("T", " "))
        except ValueError:
            pass
    raise where.error(key, "must be a number, a date written 2023-01-01 (a DATE or TIMESTAMP column) or a "
                      "date-time written 2023-01-01T08:00:00 or \"2023-01-01 08:00:00\" (a TIMESTAMP column)")


def _time_span(span: tuple[_dt.date, _dt.date]) -> tuple[_dt.datetime, _dt.datetime]:
    def at(v: _dt.date, t: _dt.time) -> _dt.datetime:
        return v if isinstance(v, _dt.datetime) else _dt.datetime.combine(v, t)
    return at(span[0], _dt.time.min), at(span[1], _dt.time.max)


# -- where a key is in TOML text --------------------------------------------------------------------

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY_PART = re.compile(rf"\s*({_BARE}|{_QUOTED})\s*")


def locate(text: str, key: str) -> int | None:
    """The 1-based line that defines a dotted key path in TOML text, or None.

    `key` is a path such as ``tables.people.columns.age.lower``. Table headers
    (``[tables.people.columns]``, ``[[...]]``), dotted keys (``a.b = 1``) and inline tables
    (``age = { lower = 0, upper = 1 }``, also nested) are followed. If the path itself is not
    written (a missing key), the line of its nearest enclosing table or key is returned, so a
    message about ``budget.epsilon`` points at ``[budget]``. A line scanner, not a parser: it
    is meant for valid TOML (tomllib reports its own errors' lines); multi-line strings and
    arrays are skipped over.
    """
    want = tuple(key.split(".")) if key else ()
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    pending: str | None = None             # closing quote of a multi-line string being skipped
    depth = 0                              # bracket depth of a multi-line array/inline table
    for n, line in enumerate(text.splitlines(), start=1):
        if pending is not None:
            if pending in line:
                pending = None
            continue
        if depth > 0:
            depth = max(0, depth + _depth(line))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            inner = stripped[2:] if stripped.startswith("[[") else stripped[1:]
            parts, rest = _key_path(inner)
            if parts is not None and rest.lstrip().startswith("]"):
                table = parts
                for i in range(1, len(parts) + 1):
                    found.setdefault(parts[:i], n)
            continue
        parts, rest = _key_path(line)
        if parts is None or not rest.startswith("="):
            continue
        path = table + parts
        for i in range(len(table) + 1, len(path) + 1):
            found.setdefault(path[:i], n)
        value = rest[1:].lstrip()
        for triple in ('"""', "'''"):
            if value.startswith(triple) and value.count(triple) == 1:
                pending = triple
        if value.startswith("{"):
            _inline_keys(value, path, n, found)
        if pending is None and value[:1] in "[{":
            depth = max(0, _depth(value))
    for i in range(len(want), 0, -1):
        if want[:i] in found:
            return found[want[:i]]
    return None


def _key_path(text: str) -> tuple[tuple[str, ...] | None, str]:
    """Parse a (dotted) key at the start of text: (parts, the rest) or (None, text)."""
    parts, pos = [], 0
    while True:
        m = _KEY_PART.match(text, pos)
        if m is None:
            return None, text
        tok = m.group(1)
        parts.append(tok[1:-1] if tok[0] in "\"'" else tok)
        pos = m.end()
        if text[pos:pos + 1] != ".":
            return tuple(parts), text[pos:]
        pos += 1


def _inline_keys(value: str, path: tuple[str, ...], line: int, found: dict) -> None:
    """Record the keys of an inline table (and nested ones) written on this line."""
    stack, i, expect_key = [path], 1, True
    while i < len(value) and stack:
        ch = value[i]
        if ch in "\"'":
            end = _string_end(value, i)
            if expect_key:
                parts, rest = _key_path(value[i:])
                if parts is not None and rest.startswith("="):
                    i = len(value) - len(rest)
                    continue
            i = end
            continue
        if expect_key and not ch.isspace() and ch not in ",}":
            parts, rest = _key_path(value[i:])
            if parts is None or not rest.startswith("="):
                return
            full = stack[-1] + parts
            for k in range(len(stack[-1]) + 1, len(full) + 1):
                found.setdefault(full[:k], line)
            i = len(value) - len(rest) + 1
            expect_key = False
            rest_value = value[i:].lstrip()
            if rest_value.startswith("{"):
                stack.append(full)
                i = len(value) - len(rest_value) + 1
                expect_key = True
            continue
        if ch == "[":
            end = _array_end(value, i)
            if end is None:
                return
            i = end
            continue
        if ch == ",":
            expect_key = True
        elif ch == "}":
            stack.pop()
            expect_key = False
        i += 1


def _string_end(text: str, i: int) -> int:
    quote, j = text[i], i + 1
    while j < len(text):
        if quote == '"' and text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            return j + 1
        j += 1
    return len(text)


def _array_end(text: str, i: int) -> int | None:
    depth, j = 0, i
    while j < len(text):
        ch = text[j]
        if ch in "\"'":
            j = _string_end(text, j)
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _depth(text: str) -> int:
    """Net count of opening minus closing brackets and braces, outside strings and comments."""
    depth, j = 0, 0
    while j < len(text):
        ch = text[j]
        if ch in "\"'":
            j = _string_end(text, j)
            continue
        if ch == "#":
            break
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        j += 1
    return depth
