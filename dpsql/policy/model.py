"""The privacy policy's frozen model: what a validated policy declares (dpsql.policy.load builds it).

A policy declares the protected tables, the column that identifies a person (the
privacy unit), how much one person may contribute, each column's bounds or public
value domain, and the analysts' privacy budget. Everything is validated once, when the
policy is read (dpsql.policy.load); these objects are then immutable.

Names are case-insensitive (stored lower-case), as unquoted SQL identifiers are.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from dpsql.errors import PolicyError
from dpsql.filetypes import FileTypes
from dpsql.policy.where import Where

__all__ = [
    "ACCOUNTANTS", "AUTH_METHODS", "DEFAULT_BLOCKS", "DEFAULT_CACHE_LIFETIME", "DEFAULT_FLOOR",
    "DEFAULT_MAX_CACHED_BYTES", "DEFAULT_MAX_QUANTILE_WORK", "DEFAULT_MAX_RELEASED_CELLS", "DEFAULT_MAX_RELEASED_ROWS",
    "DEFAULT_MIN_EPSILON", "DEFAULT_QUANTUM", "DEFAULT_SURCHARGE", "MAX_RELEASED_ROWS_CEILING", "MAX_WORK_CEILING",
    "MECHANISMS", "SAMPLE_AGGREGATES", "UNDECLARED", "Analyst", "Budget", "ColumnPolicy", "Defaults", "Functions",
    "Limits", "Link", "Policy", "Public", "Reconstruction", "Server", "TablePolicy", "Timing", "default_accountant",
    "exact", "span_instants",
]

MECHANISMS = ("laplace", "gaussian", "gaussian_classic")
UNDECLARED = ("refuse", "public")
AUTH_METHODS = ("scram-sha-256", "trust")
DEFAULT_SURCHARGE = 1.0
DEFAULT_CACHE_LIFETIME = 30 * 86400     # seconds
ACCOUNTANTS = ("zcdp", "basic")
DEFAULT_MIN_EPSILON = 0.01
DEFAULT_QUANTUM = 0.05          # seconds
DEFAULT_FLOOR = 0.1             # seconds
DEFAULT_MAX_RELEASED_ROWS = 100_000
DEFAULT_MAX_CACHED_BYTES = 64 * 1024 * 1024
MAX_RELEASED_ROWS_CEILING = 1_000_000
DEFAULT_MAX_RELEASED_CELLS = 2_000_000     # noisy values one query may demand (see Limits)
DEFAULT_MAX_QUANTILE_WORK = 1_000_000       # quantile choices one query may demand (see Limits)
MAX_WORK_CEILING = 10**9
SAMPLE_AGGREGATES = ("corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept")
DEFAULT_BLOCKS = 16


def exact(value: float | int) -> Fraction:
    """A policy number as the decimal the user wrote. TOML reads `0.10` as the double nearest to
    it, whose exact binary value is not 1/10 (and has 55 decimal digits); the shortest decimal
    that reads back as the same double (Python's repr) is the number as written, for every
    decimal of up to 15 significant digits. Bounds, clamps and sensitivities use this value, so
    the SQL literal is `0.10`'s exact decimal and a bound of -999.99 is -999.99."""
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(repr(float(value)))


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
        return span_instants(self.span) if self.span is not None else None


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
        deltas add up (dpsql.ledger.accounting). Fixed per analyst at their first charge (dpsql.ledger.budget)."""
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
    """When a private answer is released (dpsql.release.release_delay): not before `floor`
    seconds after the query started, and then only at a whole multiple of `quantum` seconds
    from its start, so that small data-dependent differences in run time vanish. 0 disables each.

    where: where the analyst's WHERE is evaluated. "aggregate" (the default): per row inside the
    per-unit aggregates (FILTER), so the work before the per-unit rows does not depend on which
    rows pass. "rows": as a row filter the engine can neither push into a scan nor decide from
    its statistics (dpsql.rewrite.rows.fenced), so every row is still read, but only the passing
    rows are grouped by unit: faster, at the price of run time that grows with the number of
    passing rows, which only the release floor hides (so it requires floor > 0)."""
    quantum: float = DEFAULT_QUANTUM
    floor: float = DEFAULT_FLOOR
    where: str = "aggregate"    # "rows": the analyst's WHERE filters rows, behind a fence (docs/PRIVACY.md)


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
    query_wait: float = 30.0            # seconds a statement waits for one of its analyst's query slots


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
        return Where(self.source, self.text).error(key, problem)

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
            accountant = default_accountant(delta)
        return Budget(self.budget.epsilon if a.epsilon is None else a.epsilon, delta, self.budget.ledger,
                      accountant)

    def check_schema(self, table_columns, problems: list[PolicyError] | None = None) -> None:
        """Check every protected table and declared column exists in the engine; each error
        names its line in the policy file. With `problems`, every mismatch is appended there
        instead of raising the first.

        `table_columns(name)` returns {column: type} or raises KeyError for a
        missing table.
        """
        where = Where(self.source, self.text, problems)

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


def default_accountant(delta: float) -> str:
    """zCDP accounting needs a delta to convert to; a pure epsilon budget keeps basic composition."""
    return "zcdp" if delta > 0 else "basic"


def span_instants(span: tuple[_dt.date, _dt.date]) -> tuple[_dt.datetime, _dt.datetime]:
    """Date bounds as instants: a date's first (lower) or last (upper) moment, a date-time as given."""
    def at(v: _dt.date, t: _dt.time) -> _dt.datetime:
        return v if isinstance(v, _dt.datetime) else _dt.datetime.combine(v, t)
    return at(span[0], _dt.time.min), at(span[1], _dt.time.max)
