"""Reading a policy: TOML file or dict -> frozen, validated Policy (dpsql.policy.model).

Everything is validated once, here; every problem is reported with the file, the key (and its
line, dpsql.policy.locate) and what is wrong. ``load_policy`` raises the first problem;
``policy_problems`` (`dpsql policy check`) reports them all.
"""
from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpsql.errors import PolicyError
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
    Defaults,
    Functions,
    Limits,
    Policy,
    Public,
    Reconstruction,
    Server,
    TablePolicy,
    Timing,
    default_accountant,
)
from dpsql.policy.tables import check_links, check_shared_types, declared_types, table_policy
from dpsql.policy.where import Where, fail, missing, number, table, unknown

__all__ = ["load_policy", "policy_problems"]

_TOP_KEYS = {"budget", "defaults", "tables", "reconstruction", "server", "analysts", "public", "limits", "timing",
             "functions"}
_RECON_KEYS = {"surcharge", "max_subset_queries", "cache_lifetime", "audit_log"}
_SERVER_KEYS = {"auth", "tls_cert", "tls_key", "max_message_bytes", "max_concurrent_queries",
                "catalog_timeout", "catalog_max_rows", "max_connections", "max_connections_per_analyst",
                "query_wait"}
_PUBLIC_KEYS = {"tables", "undeclared", "types"}
_ANALYST_KEYS = {"password", "epsilon", "delta", "accountant"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_ANALYST_NAME = re.compile(r"^[\w.@+-]{1,128}$")
_BUDGET_KEYS = {"epsilon", "delta", "ledger", "accountant"}
_DEFAULT_KEYS = {"epsilon", "delta", "mechanism", "min_epsilon", "min_rho", "rho"}
_TIMING_KEYS = {"quantum", "floor", "where"}
_LIMIT_KEYS = {"max_released_rows", "max_cached_bytes", "max_released_cells", "max_quantile_work"}
_FUNCTION_KEYS = {"sample_aggregate", "blocks"} | set(SAMPLE_AGGREGATES)


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
    where = Where(source, text, problems)
    where.attempt(unknown, where, "", data, _TOP_KEYS)
    budget = where.attempt(_budget, where, data, base)
    defaults = where.attempt(_defaults, where, data, budget) if budget is not None else None
    accountant = budget is not None and isinstance(data.get("budget"), Mapping) and \
        data["budget"].get("accountant") is not None

    tables: dict[str, TablePolicy] = {}
    declared = where.attempt(table, where, "tables", data.get("tables", {}), default={})
    for tname, t in declared.items():
        tp = where.attempt(table_policy, where, tname, t)
        if tp is None:
            continue
        if tp.name in tables:
            where.attempt(fail, where, f"tables.{tname}", "declared twice (names are case-insensitive)")
            continue
        tables[tp.name] = tp
    where.attempt(check_links, where, tables, {str(n).lower() for n in declared})
    where.attempt(check_shared_types, where, tables)
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


def _budget(where: Where, data: Mapping[str, Any], base: Path) -> Budget:
    b = table(where, "budget", data.get("budget", None) or missing(where, "budget"))
    unknown(where, "budget.", b, _BUDGET_KEYS)
    if "epsilon" not in b:
        raise where.error("budget.epsilon", "missing: every policy sets each analyst's lifetime epsilon")
    eps = number(where, "budget.epsilon", b["epsilon"], positive=True, allow_zero=False)
    delta = number(where, "budget.delta", b.get("delta", 0.0), positive=True)
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
    return Budget(eps, delta, ledger, accountant or default_accountant(delta))


def _defaults(where: Where, data: Mapping[str, Any], budget: Budget) -> Defaults:
    eps, delta = budget.epsilon, budget.delta
    d = table(where, "defaults", data.get("defaults", {}))
    unknown(where, "defaults.", d, _DEFAULT_KEYS)
    d_eps = number(where, "defaults.epsilon", d.get("epsilon", min(0.1, eps)), positive=True,
                    allow_zero=False)
    if d_eps > eps:
        raise where.error("defaults.epsilon", "exceeds the lifetime budget.epsilon")
    d_delta = number(where, "defaults.delta", d.get("delta", delta / 100), positive=True)
    if d_delta > delta:
        raise where.error("defaults.delta", "exceeds the lifetime budget.delta")
    mech = d.get("mechanism", "laplace")
    if mech not in MECHANISMS:
        raise where.error("defaults.mechanism", f"must be one of {', '.join(MECHANISMS)}")
    if mech != "laplace" and d_delta <= 0:
        raise where.error("defaults.delta", "the Gaussian mechanisms need a positive delta")
    min_eps = number(where, "defaults.min_epsilon", d.get("min_epsilon", min(DEFAULT_MIN_EPSILON, d_eps)),
                      positive=True, allow_zero=False)
    if min_eps > d_eps:
        raise where.error("defaults.min_epsilon", "exceeds defaults.epsilon")
    min_rho = d.get("min_rho")
    if min_rho is not None:
        min_rho = number(where, "defaults.min_rho", min_rho, positive=True, allow_zero=False)
    d_rho = d.get("rho")
    if d_rho is not None:
        d_rho = number(where, "defaults.rho", d_rho, positive=True, allow_zero=False)
        if d_rho < (min_rho if min_rho is not None else min_eps ** 2 / 2):
            raise where.error("defaults.rho", "is below defaults.min_rho (by default min_epsilon^2 / 2)")
        if budget.accountant != "zcdp":
            raise where.error("defaults.rho", "needs zcdp accounting (budget.accountant; a budget delta > 0)")
    return Defaults(d_eps, d_delta, mech, min_eps, min_rho, d_rho)


def _functions(where: Where, f: Any) -> Functions:
    f = table(where, "functions", f)
    unknown(where, "functions.", f, _FUNCTION_KEYS)
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
            r = table(where, f"functions.{n}", f[n])
            unknown(where, f"functions.{n}.", r, {"lower", "upper"})
            if "lower" not in r or "upper" not in r:
                raise where.error(f"functions.{n}", "give both lower and upper")
            lo = number(where, f"functions.{n}.lower", r["lower"])
            hi = number(where, f"functions.{n}.upper", r["upper"])
            if not lo < hi:
                raise where.error(f"functions.{n}", "need lower < upper")
            if max(abs(lo), abs(hi)) > 1e15:
                raise where.error(f"functions.{n}", "bounds beyond 1e15 are not supported")
            ranges[n] = (lo, hi)
    return Functions(frozenset(names), blocks, ranges)


def _check_accountant(where: Where, key: str, value: Any, delta: float) -> None:
    if value not in ACCOUNTANTS:
        raise where.error(key, f"must be one of {', '.join(ACCOUNTANTS)}")
    if value == "zcdp" and delta <= 0:
        raise where.error(key, "zcdp accounting needs a budget delta > 0 (a rho-zCDP total is never "
                          "(epsilon, 0)-DP); use \"basic\" for a pure epsilon budget")


def _path(where: Where, key: str, value: Any, base: Path) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise where.error(key, "must be a file path")
    path = Path(value)
    return path if path.is_absolute() else base / path


def _duration(where: Where, key: str, value: Any) -> float:
    """Seconds, from a number or a text like '90s', '12h', '30d', '2w'."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m is None:
            raise where.error(key, "must be seconds or a duration such as '12h', '30d' or '2w'")
        return float(m.group(1)) * _UNITS[m.group(2)]
    return number(where, key, value, positive=True)


def _reconstruction(where: Where, r: Any, base: Path) -> Reconstruction:
    r = table(where, "reconstruction", r)
    unknown(where, "reconstruction.", r, _RECON_KEYS)
    surcharge = number(where, "reconstruction.surcharge", r.get("surcharge", DEFAULT_SURCHARGE), positive=True)
    cap = r.get("max_subset_queries", "auto")
    if cap == "auto":
        cap = None
    elif isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise where.error("reconstruction.max_subset_queries", "must be \"auto\" or a whole number >= 0")
    lifetime = _duration(where, "reconstruction.cache_lifetime", r.get("cache_lifetime", DEFAULT_CACHE_LIFETIME))
    audit = r.get("audit_log")
    audit = _path(where, "reconstruction.audit_log", audit, base) if audit is not None else None
    return Reconstruction(surcharge, cap, lifetime, audit)


def _timing(where: Where, t: Any) -> Timing:
    t = table(where, "timing", t)
    unknown(where, "timing.", t, _TIMING_KEYS)
    quantum = _duration(where, "timing.quantum", t.get("quantum", DEFAULT_QUANTUM))
    floor = _duration(where, "timing.floor", t.get("floor", DEFAULT_FLOOR))
    if quantum > 60 or floor > 600:
        raise where.error("timing", "quantum is at most 60 s and floor at most 600 s")
    place = t.get("where", "aggregate")
    if place not in ("aggregate", "rows"):
        raise where.error("timing.where", 'must be "aggregate" (the default) or "rows"')
    if place == "rows" and floor <= 0:
        raise where.error("timing.where", '"rows" makes run time grow with the rows the analyst\'s WHERE '
                          "passes, which only the release floor hides: set [timing] floor above 0 (the "
                          "default is 0.1 s), or keep the default where = \"aggregate\"")
    return Timing(quantum, floor, place)


def _limits(where: Where, lim: Any) -> Limits:
    lim = table(where, "limits", lim)
    unknown(where, "limits.", lim, _LIMIT_KEYS)
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


def _server(where: Where, s: Any, base: Path) -> Server:
    s = table(where, "server", s)
    unknown(where, "server.", s, _SERVER_KEYS)
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
    wait = _duration(where, "server.query_wait", s.get("query_wait", 30.0))
    if not 0 <= wait <= 3600:
        raise where.error("server.query_wait", "must be from 0 (refuse at once) to 3600 seconds")
    return Server(auth, cert, key, size, conc, timeout, cat_rows, conns, own, wait)


def _public(where: Where, p: Any, tables: Mapping[str, TablePolicy]) -> Public:
    p = table(where, "public", p)
    unknown(where, "public.", p, _PUBLIC_KEYS)
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
    for n, cols in table(where, "public.types", p.get("types", {})).items():
        if n.lower() in tables:
            raise where.error(f"public.types.{n}", f"{n.lower()!r} is a protected table: declare its types under "
                              f"[tables.{n.lower()}.types]")
        types[n.strip().lower()] = declared_types(where, f"public.types.{n}", cols)
    return Public(out, undeclared, types)


def _analysts(where: Where, a: Any, defaults: Defaults, budget: Budget, explicit: bool) -> dict[str, Analyst]:
    out: dict[str, Analyst] = {}
    for name, entry in table(where, "analysts", a).items():
        key = f"analysts.{name}"
        if not _ANALYST_NAME.match(name):
            raise where.error(key, "an analyst name has 1-128 letters, digits or . _ @ + -")
        entry = table(where, key, entry)
        unknown(where, key + ".", entry, _ANALYST_KEYS)
        password = entry.get("password")
        if password is not None and (not isinstance(password, str)
                                     or not re.fullmatch(r"SCRAM-SHA-256\$\d+:[A-Za-z0-9+/=]+\$"
                                                         r"[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+", password)):
            raise where.error(f"{key}.password", "must be a SCRAM-SHA-256 verifier "
                              "(`dpsql passwd NAME` prints one), never a plain-text password")
        eps = entry.get("epsilon")
        if eps is not None:
            eps = number(where, f"{key}.epsilon", eps, positive=True, allow_zero=False)
            if defaults.epsilon > eps:
                raise where.error(f"{key}.epsilon", "is below defaults.epsilon")
        delta = entry.get("delta")
        if delta is not None:
            delta = number(where, f"{key}.delta", delta, positive=True)
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
