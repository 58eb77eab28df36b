"""The bundled demo: a synthetic database and its policy in the user's data directory.

ensure_demo() builds <data dir>/demo/demo.duckdb (20000 people, seed 0, from dpsql.datagen)
and policy.toml beside it on first use. Each file is built under a temporary name in the same
directory and moved into place with os.replace, while holding an advisory lock, so two
processes starting at once, or a crash mid-build, never leave a half-made demo. Once both
files exist, ensure_demo only checks that they do.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb

from dpsql import datagen

try:
    import fcntl
except ImportError:                     # Windows: no advisory lock; os.replace still keeps files whole
    fcntl = None

DEMO_ANALYST = "analyst"
DEMO_PEOPLE = 20_000
DEMO_SEED = 0
DEMO_EPSILON = 10.0                     # lifetime, per analyst
DEMO_DELTA = 1e-6
DEMO_QUERY_EPSILON = 0.5                # per query after SET dpsql.epsilon (ends the default rho)
DEMO_QUERY_RHO = 0.05                   # per query unless SET: zCDP accounting, Gaussian noise
DEMO_MECHANISM = "gaussian"             # under zCDP, Gaussian noise is the cheaper (README: The ledger)

_DB, _POLICY, _LOCK = "demo.duckdb", "policy.toml", ".lock"
_TMP = ".tmp-"                      # prefix of files being built; leftovers of a crash are removed


def data_dir() -> Path:
    """$DPSQL_HOME if set, else $XDG_DATA_HOME/dpsql, else ~/.local/share/dpsql."""
    if home := os.environ.get("DPSQL_HOME"):
        return Path(home).expanduser()
    if xdg := os.environ.get("XDG_DATA_HOME"):
        return Path(xdg).expanduser() / "dpsql"
    return Path.home() / ".local" / "share" / "dpsql"


def ensure_demo(directory: Path | None = None) -> tuple[Path, Path]:
    """Return (database path, policy path) of the demo under `directory` (default data_dir()).

    Builds whichever of the two files is missing; the ledger (budget.sqlite, next to the
    policy) is left to the first session that charges it.
    """
    root = Path(directory if directory is not None else data_dir()).expanduser() / "demo"
    db, policy = root / _DB, root / _POLICY
    if db.is_file() and policy.is_file():
        return db, policy
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / _LOCK):
        _remove_leftovers(root)
        if not db.is_file():
            _build_database(db)
        if not policy.is_file():
            _write_atomically(policy, policy_toml(_demo_policy()).encode("utf-8"))
    return db, policy


def _demo_policy() -> dict[str, Any]:
    return datagen.demo_policy("budget.sqlite", epsilon=DEMO_EPSILON, delta=DEMO_DELTA,
                               query_epsilon=DEMO_QUERY_EPSILON, mechanism=DEMO_MECHANISM, accountant="zcdp",
                               query_rho=DEMO_QUERY_RHO)


def _build_database(db: Path) -> None:
    tmp = db.with_name(f"{_TMP}{uuid.uuid4().hex}-{db.name}")
    try:
        con = duckdb.connect(str(tmp))
        try:
            datagen.generate(con, DEMO_PEOPLE, seed=DEMO_SEED)
            con.execute("CHECKPOINT")          # everything in the main file, no WAL to lose
        finally:
            con.close()
        if Path(f"{tmp}.wal").exists():
            raise OSError(f"the demo database {tmp} kept a write-ahead log after closing")
        _fsync(tmp)
        os.replace(tmp, db)
        _fsync_dir(db.parent)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{_TMP}{uuid.uuid4().hex}-{path.name}")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _remove_leftovers(root: Path) -> None:
    """Delete files a crashed build left. Only called under the lock, so no build is running."""
    if fcntl is None:
        return
    for leftover in root.glob(f"{_TMP}*"):
        leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path` (blocking) for the duration."""
    if fcntl is None:
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- TOML for the fixed policy structure ---------------------------------------------------

_HEADER = """\
# dpsql demo policy: what an analyst may ask of demo.duckdb, and how much privacy it costs.
# Written by dpsql.demo on first use; delete this file (or the whole demo directory) to have it rewritten.
#
# [budget]            each analyst's lifetime privacy budget (epsilon, delta), the SQLite ledger
#                     that records spending (a relative path is relative to this file), and how
#                     queries are added up: accountant "zcdp" (each query costs rho; the total must
#                     convert to within epsilon, delta) or "basic" (epsilons and deltas add)
# [defaults]          per-query cost and noise mechanism, unless a session sets others
#                     (SET dpsql.rho = ..., or SET dpsql.epsilon = ... for an (epsilon, delta) per query)
# [tables.<name>]     a protected table: privacy_unit is the column that identifies a person;
#                     one person contributes at most max_rows_per_unit rows and to at most
#                     max_groups_per_unit groups of a GROUP BY (the rest are dropped before aggregating)
# [tables.<name>.columns]
#                     the only columns queries may use. lower/upper: public bounds, values are clamped
#                     to them before SUM or AVG; values: the public list of keys, every one of which a
#                     GROUP BY releases; {} declares a column for filtering only (grouping by it needs
#                     a noisy threshold on each key)
# [public]            tables: the tables analysts may read row by row (lookup tables, say). Any table
#                     that is neither protected nor listed here is refused, including tables created
#                     later (undeclared = "refuse", the default; "public" reopens them all)
"""

_SECTION_NOTES = {
    "budget": "Lifetime budget per analyst.",
    "defaults": "Per query, unless SET in the session.",
}

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def policy_toml(policy: Mapping[str, Any], header: str = _HEADER) -> str:
    """TOML text of a policy dict: budget, defaults, then each table and its columns.

    A small writer for this fixed structure (tomllib only reads): scalar keys and lists of
    scalars in sections, columns as inline tables.
    """
    out = [header.rstrip("\n")]
    for section in ("budget", "defaults"):
        if section in policy:
            out += ["", f"# {_SECTION_NOTES[section]}", f"[{section}]"]
            out += [f"{_key(k)} = {_value(v)}" for k, v in policy[section].items()]
    for name, table in policy.get("tables", {}).items():
        out += ["", f"[tables.{_key(name)}]"]
        out += [f"{_key(k)} = {_value(v)}" for k, v in table.items() if k != "columns"]
        columns = table.get("columns", {})
        if columns:
            out += ["", f"[tables.{_key(name)}.columns]"]
            out += [f"{_key(c)} = {_inline(spec)}" for c, spec in columns.items()]
    for section in ("public", "timing", "limits"):
        if section in policy:
            out += ["", f"[{section}]"]
            out += [f"{_key(k)} = {_value(v)}" for k, v in policy[section].items()]
    if "reconstruction" in policy:
        out += ["", "[reconstruction]"]
        out += [f"{_key(k)} = {_value(v)}" for k, v in policy["reconstruction"].items()]
    if "server" in policy:
        out += ["", "[server]"]
        out += [f"{_key(k)} = {_value(v)}" for k, v in policy["server"].items()]
    for name, entry in policy.get("analysts", {}).items():
        out += ["", f"[analysts.{_key(name)}]"]
        out += [f"{_key(k)} = {_value(v)}" for k, v in entry.items()]
    unknown = set(policy) - {"budget", "defaults", "tables", "public", "timing", "limits", "reconstruction",
                             "server", "analysts"}
    if unknown:
        raise ValueError(f"policy_toml: unknown section {sorted(unknown)[0]!r}")
    return "\n".join(out) + "\n"


def _inline(spec: Mapping[str, Any]) -> str:
    if not spec:
        return "{}"
    return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in spec.items()) + " }"


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("policy_toml: numbers must be finite")
        return repr(value)                 # '10.0', '1e-06': both valid TOML floats
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        return value.isoformat()           # a TOML local date: 2023-01-01
    if isinstance(value, (str, os.PathLike)):
        return _string(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return _inline(value)
    raise ValueError(f"policy_toml: cannot write a {type(value).__name__}")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    def escape(ch: str) -> str:
        if ch in _ESCAPES:
            return _ESCAPES[ch]
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"\\u{ord(ch):04X}"
        return ch

    return '"' + "".join(escape(ch) for ch in text) + '"'
