"""Validating [tables.NAME] (privacy unit or link, contribution limits, columns, file types) and [public.types]."""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping
from typing import Any

from dpsql.filetypes import FileTypes, file_type
from dpsql.policy.model import ColumnPolicy, Link, TablePolicy, span_instants
from dpsql.policy.where import Where, count, number, table, unknown

__all__ = ["check_links", "check_shared_types", "declared_types", "table_policy"]

_TABLE_KEYS = {"privacy_unit", "link", "max_rows_per_unit", "max_groups_per_unit", "columns", "source", "types"}
_LINK = re.compile(r"^\s*(\w+)\s*->\s*(\w+)\s*\.\s*(\w+)\s*$")
_COLUMN_KEYS = {"lower", "upper", "values", "identifier", "bounds"}


def table_policy(where: Where, tname: str, t: Any) -> TablePolicy:
    key = f"tables.{tname}"
    t = table(where, key, t)
    unknown(where, key + ".", t, _TABLE_KEYS)
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
    rows = where.attempt(count, where, f"{key}.max_rows_per_unit", t.get("max_rows_per_unit", 1), default=1)
    groups = where.attempt(count, where, f"{key}.max_groups_per_unit", t.get("max_groups_per_unit", 1), default=1)
    source = t.get("source")
    if source is not None and (not isinstance(source, str) or not source):
        raise where.error(f"{key}.source", "must be a table name or path")
    columns: dict[str, ColumnPolicy] = {}
    for cname, c in table(where, f"{key}.columns", t.get("columns", {})).items():
        col = where.attempt(column_policy, where, f"{key}.columns.{cname}", cname, c)
        if col is None:
            continue        # recorded (policy check); the table's other columns are still checked
        if unit is not None and col.name == unit.lower():
            raise where.error(f"{key}.columns.{cname}",
                              "the privacy unit is declared by privacy_unit, not as a column")
        if link is not None and col.name == link.column:
            raise where.error(f"{key}.columns.{cname}", "the link column is declared by link, not as a column")
        columns[col.name] = col
    types = where.attempt(declared_types, where, f"{key}.types", t["types"]) if "types" in t else None
    return TablePolicy(tname.lower(), unit.lower() if unit is not None else None, rows, groups, columns, source,
                       link, types)


def check_shared_types(where: Where, tables: Mapping[str, TablePolicy]) -> None:
    """Tables read from one source are one loaded table: their declared types must agree."""
    seen: dict[str, TablePolicy] = {}
    for t in tables.values():
        if t.types is None:
            continue
        other = seen.setdefault(t.source or t.name, t)
        if other.types != t.types:
            raise where.error(f"tables.{t.name}.types", f"differ from tables.{other.name}.types, which reads the same "
                              "source: one source is loaded once, with one set of types")


def check_links(where: Where, tables: Mapping[str, TablePolicy], declared: set[str] = frozenset()) -> None:
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


def column_policy(where: Where, key: str, cname: str, c: Any) -> ColumnPolicy:
    c = table(where, key, c)
    unknown(where, key + ".", c, _COLUMN_KEYS)
    lower, upper = c.get("lower"), c.get("upper")
    if (lower is None) != (upper is None):
        raise where.error(key, "give both lower and upper, or neither")
    span = None
    if lower is not None and (_date_like(lower) or _date_like(upper)):
        span = (_date(where, f"{key}.lower", lower), _date(where, f"{key}.upper", upper))
        if not span_instants(span)[0] <= span_instants(span)[1]:
            raise where.error(key, "need lower <= upper")
        lower = upper = None
    if lower is not None:
        lower = number(where, f"{key}.lower", lower)
        upper = number(where, f"{key}.upper", upper)
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


def declared_types(where: Where, key: str, value: Any) -> FileTypes:
    """[tables.NAME.types] / [public.types.NAME]: column = "TYPE" for each column of a table read
    from a file, in the order given; the table is loaded with exactly these columns."""
    value = table(where, key, value)
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


def _date(where: Where, key: str, value: Any) -> _dt.date:
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
