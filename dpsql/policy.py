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
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dpsql.errors import PolicyError

MECHANISMS = ("laplace", "gaussian", "gaussian_classic")

_TOP_KEYS = {"budget", "defaults", "tables", "reconstruction", "server", "analysts", "public", "limits", "timing"}
_RECON_KEYS = {"surcharge", "max_subset_queries", "cache_lifetime", "audit_log"}
_SERVER_KEYS = {"auth", "tls_cert", "tls_key", "max_message_bytes"}
_ANALYST_KEYS = {"password", "epsilon", "delta"}
AUTH_METHODS = ("scram-sha-256", "trust")
DEFAULT_SURCHARGE = 1.0
DEFAULT_CACHE_LIFETIME = 30 * 86400     # seconds
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_ANALYST_NAME = re.compile(r"^[\w.@+-]{1,128}$")
_BUDGET_KEYS = {"epsilon", "delta", "ledger"}
_DEFAULT_KEYS = {"epsilon", "delta", "mechanism", "min_epsilon"}
_TIMING_KEYS = {"quantum", "floor"}
_LIMIT_KEYS = {"max_released_rows", "max_cached_bytes"}
DEFAULT_MIN_EPSILON = 0.01
DEFAULT_QUANTUM = 0.05          # seconds
DEFAULT_FLOOR = 0.1             # seconds
DEFAULT_MAX_RELEASED_ROWS = 100_000
DEFAULT_MAX_CACHED_BYTES = 64 * 1024 * 1024
MAX_RELEASED_ROWS_CEILING = 1_000_000
_TABLE_KEYS = {"privacy_unit", "max_rows_per_unit", "max_groups_per_unit", "columns", "source"}
_COLUMN_KEYS = {"lower", "upper", "values", "identifier"}


class _Where:
    """Formats 'file: key: problem' messages; 'file: line N: key: problem' when the TOML
    text is known and the key (or its nearest enclosing table) is found in it."""

    def __init__(self, source: str, text: str | None = None):
        self.source, self.text = source, text

    def error(self, key: str, problem: str) -> PolicyError:
        line = locate(self.text, key) if self.text is not None else None
        at = f"line {line}: " if line is not None else ""
        return PolicyError(f"policy {self.source}: {at}{key}: {problem}")


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
    """Per-query settings an analyst may change with SET.

    min_epsilon: the smallest epsilon one query may use (SET dpsql.epsilon below it is refused).
        Every answer also releases things that are not noised (its run time, whether it
        succeeded); a floor on each query's price bounds how many such probes one budget buys
        (budget.epsilon / min_epsilon), whatever else leaks per probe."""
    epsilon: float
    delta: float
    mechanism: str
    min_epsilon: float = DEFAULT_MIN_EPSILON


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
        dropped to make room, and an answer larger than it is not cached (a repeat is charged)."""
    max_released_rows: int = DEFAULT_MAX_RELEASED_ROWS
    max_cached_bytes: int = DEFAULT_MAX_CACHED_BYTES


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


@dataclass(frozen=True, slots=True)
class Analyst:
    """One analyst's entry: a SCRAM verifier for the proxy and, optionally, an own budget."""
    name: str
    password: str | None = None          # 'SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>'
    epsilon: float | None = None
    delta: float | None = None


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

    def table(self, name: str) -> TablePolicy | None:
        return self.tables.get(name.lower())

    def budget_for(self, analyst: str) -> Budget:
        """The analyst's lifetime budget: their [analysts.NAME] epsilon/delta where set, else [budget]."""
        a = self.analysts.get(analyst)
        if a is None:
            return self.budget
        return Budget(self.budget.epsilon if a.epsilon is None else a.epsilon,
                      self.budget.delta if a.delta is None else a.delta, self.budget.ledger)

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
        raise PolicyError(f"policy {path}: {_toml_error(err)}") from None
    return _build(data, str(path), base=path.resolve().parent, text=text)


def _toml_error(err: tomllib.TOMLDecodeError) -> str:
    """'line N: not valid TOML: problem (column C)' from tomllib's '... (at line N, column C)'."""
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)\s*$", str(err))
    if m is None:
        return f"not valid TOML: {err}"
    return f"line {m.group(1)}: not valid TOML: {str(err)[:m.start()]} (column {m.group(2)})"


def _build(data: Mapping[str, Any], source: str, *, base: Path, text: str | None = None) -> Policy:
    where = _Where(source, text)
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
    min_eps = _number(where, "defaults.min_epsilon", d.get("min_epsilon", min(DEFAULT_MIN_EPSILON, d_eps)),
                      positive=True, allow_zero=False)
    if min_eps > d_eps:
        raise where.error("defaults.min_epsilon", "exceeds defaults.epsilon")
    defaults = Defaults(d_eps, d_delta, mech, min_eps)

    tables: dict[str, TablePolicy] = {}
    for tname, t in _table(where, "tables", data.get("tables", {})).items():
        tp = _table_policy(where, tname, t)
        if tp.name in tables:
            raise where.error(f"tables.{tname}", "declared twice (names are case-insensitive)")
        tables[tp.name] = tp
    recon = _reconstruction(where, data.get("reconstruction", {}), base)
    server = _server(where, data.get("server", {}), base)
    analysts = _analysts(where, data.get("analysts", {}), defaults)
    timing = _timing(where, data.get("timing", {}))
    limits = _limits(where, data.get("limits", {}))
    return Policy(budget, defaults, tables, source, recon, server, analysts, timing=timing, limits=limits)


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
    return Limits(rows, size)


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
    return Server(auth, cert, key, size)


def _analysts(where: _Where, a: Any, defaults: Defaults) -> dict[str, Analyst]:
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
        out[name] = Analyst(name, password, eps, delta)
    return out


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
