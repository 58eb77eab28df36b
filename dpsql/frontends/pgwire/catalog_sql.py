"""Which statements are catalog queries, and their translation to the emulated catalog.

classify() parses a SELECT (PostgreSQL dialect), sorts every relation it names into catalog,
data or refused, refuses data-reading functions and secret columns, and rewrites a catalog
query for the private DuckDB database of catalog_db: pg_catalog/information_schema relations
to their emulations, PostgreSQL-only functions to macros, reg* casts to lookups.
Nothing here runs a query.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from dpsql.errors import QueryRejected
from dpsql.frontends.pgwire.catalog_db import RELATIONS, SECRET_COLUMNS, duck_table
from dpsql.sqltext import skip, strip_comments

# Catalog relations that hold data, statistics about it, or server secrets: never answered.
_BLOCKED_PREFIXES = ("pg_stat", "pg_statio_", "pg_largeobject")
_BLOCKED = {"pg_statistic", "pg_statistic_ext_data", "pg_stats", "pg_stats_ext", "pg_stats_ext_exprs",
            "pg_shadow", "pg_user_mapping", "pg_user_mappings", "pg_file_settings", "pg_hba_file_rules",
            "pg_ident_file_mappings", "pg_db_role_setting", "pg_replication_slots", "pg_subscription",
            "pg_subscription_rel"}
# Functions that read data, files, other servers or large objects.
_DATA_FUNCTIONS = {"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "table_to_xml",
                   "table_to_xmlschema", "table_to_xml_and_xmlschema", "cursor_to_xml", "cursor_to_xmlschema",
                   "schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema", "database_to_xml",
                   "database_to_xmlschema", "database_to_xml_and_xmlschema", "ts_stat", "pg_read_file",
                   "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_file_write", "pg_relation_filepath",
                   "xpath_table", "crosstab", "query_to_json", "pg_stat_get_live_tuples", "pg_logdir_ls"}
_DATA_FUNCTION_PREFIXES = ("lo_", "dblink", "pg_read", "pg_ls_", "pg_stat_", "pg_file", "pg_logical",
                           "pg_replication", "pg_current_logfile")

# PostgreSQL function -> the macro or DuckDB function that answers it (None: the same name).
_FUNCTIONS = {
    "version": "_pg_version", "current_database": "_pg_database", "current_catalog": "_pg_database",
    "current_setting": "_pg_current_setting", "format_type": "_pg_format_type",
    "pg_get_userbyid": "_pg_get_userbyid", "pg_table_is_visible": "_pg_table_is_visible",
    "pg_type_is_visible": "_pg_true", "pg_function_is_visible": "_pg_true", "pg_collation_is_visible": "_pg_true",
    "pg_opclass_is_visible": "_pg_true", "pg_operator_is_visible": "_pg_true",
    "pg_conversion_is_visible": "_pg_true", "pg_ts_config_is_visible": "_pg_true",
    "pg_get_expr": "_pg_null", "pg_get_indexdef": "_pg_null", "pg_get_constraintdef": "_pg_null",
    "pg_get_viewdef": "_pg_null", "pg_get_triggerdef": "_pg_null", "pg_get_ruledef": "_pg_null",
    "pg_get_function_result": "_pg_null", "pg_get_function_arguments": "_pg_null",
    "pg_get_function_identity_arguments": "_pg_null", "pg_get_functiondef": "_pg_null",
    "pg_get_function_sqlbody": "_pg_null", "pg_get_partkeydef": "_pg_null",
    "pg_get_statisticsobjdef_columns": "_pg_null", "pg_get_serial_sequence": "_pg_null",
    "pg_tablespace_location": "_pg_null", "obj_description": "_pg_null", "col_description": "_pg_null",
    "shobj_description": "_pg_null", "pg_relation_is_publishable": "_pg_true",
    "pg_total_relation_size": "_pg_zero", "pg_relation_size": "_pg_zero", "pg_table_size": "_pg_zero",
    "pg_indexes_size": "_pg_zero", "pg_database_size": "_pg_zero", "pg_size_pretty": "_pg_size_pretty",
    "has_table_privilege": "_pg_true", "has_schema_privilege": "_pg_true", "has_database_privilege": "_pg_true",
    "has_column_privilege": "_pg_true", "has_function_privilege": "_pg_true", "has_type_privilege": "_pg_true",
    "has_any_column_privilege": "_pg_true", "has_sequence_privilege": "_pg_true", "pg_has_role": "_pg_true",
    "quote_ident": "_pg_quote_ident", "pg_encoding_to_char": "_pg_encoding_to_char",
    "to_regtype": "_pg_regtype_in", "to_regclass": "_pg_regclass_in", "to_regproc": "_pg_regproc_in",
    "to_regnamespace": "_pg_regnamespace_in", "array_upper": "_pg_array_upper", "array_lower": "_pg_array_lower",
    "_pg_expandarray": "_pg_expandarray", "json_build_object": "json_object", "jsonb_build_object": "json_object",
    "array_to_string": None, "string_agg": None, "generate_subscripts": None, "pg_backend_pid": None,
    "array_agg": None, "unnest": None, "array_length": None, "cardinality": None, "array_position": None,
    "split_part": None, "regexp_replace": None, "replace": None, "translate": None, "left": None, "right": None,
    "format": "printf", "concat_ws": None, "concat": None, "nullif": None, "pg_is_in_recovery": None,
    "inet_server_port": None, "inet_server_addr": None, "pg_postmaster_start_time": None,
    "pg_get_keywords": None, "txid_current": None,
}
# answered by a constant in the select list (no table needed)
_BY_ARITY = {"_pg_null", "_pg_true", "_pg_zero"}
_CONSTANT_FUNCTIONS = {"pg_backend_pid", "pg_is_in_recovery", "inet_server_port", "inet_server_addr",
                       "pg_postmaster_start_time", "txid_current", "pg_get_keywords"}
# sqlglot's typed functions that could touch files or the host; DuckDB has external access off anyway
_REFUSED_TYPED = (exp.ReadCSV,) if hasattr(exp, "ReadCSV") else ()

_REG_CASTS = {"REGCLASS": ("_pg_regclass_in", "_pg_regclass_out"), "REGTYPE": ("_pg_regtype_in", "_pg_regtype_out"),
              "REGPROC": ("_pg_regproc_in", None), "REGPROCEDURE": ("_pg_regproc_in", None),
              "REGNAMESPACE": ("_pg_regnamespace_in", "_pg_regnamespace_out")}
_TYPE_ALIASES = {"oid": "BIGINT", "name": "VARCHAR", "char": "VARCHAR", "xid": "VARCHAR", "regrole": "BIGINT",
                 "pg_node_tree": "VARCHAR", "int2vector": "SMALLINT[]", "oidvector": "BIGINT[]",
                 "aclitem": "VARCHAR", "regoper": "VARCHAR", "regoperator": "VARCHAR", "bpchar": "VARCHAR"}

CATALOG_SCHEMAS = ("pg_catalog", "information_schema")


@dataclass(frozen=True)
class Translated:
    kind: str                         # "catalog" (run on the emulation) | "data" (for the Session)
    sql: str = ""                     # DuckDB SQL for kind == catalog
    sources: tuple[str | None, ...] = ()   # per output column: the catalog column it shows, if plain
    names: tuple[str, ...] = ()            # per output column: the name PostgreSQL gives it


def _refuse(what: str, reason: str) -> QueryRejected:
    return QueryRejected(what, reason, "dpsql answers catalog queries with names and types only")


_CODE_SUBS = [
    (re.compile(r'(?i)(?<![\w."])"?pg_catalog"?\s*\.\s*'), ""),
    (re.compile(r"(?i)\bOPERATOR\s*\(\s*([^()\s]+)\s*\)"), r"\1"),
    (re.compile(r'(?i)\s+COLLATE\s+(?:"[^"]*"|\w+)'), ""),
    (re.compile(r"(?i)\binformation_schema\s*\.\s*(_pg_\w+)\s*\("), r"\1("),
]


def _prepare(sql: str) -> str:
    """Comments out, pg_catalog qualifiers dropped (pg_catalog is first in PostgreSQL's search path
    anyway), OPERATOR(pg_catalog.~) and COLLATE clauses unwrapped; quoted text is left alone."""
    text = strip_comments(sql).strip().rstrip(";").strip()
    out, code, i, n = [], [], 0, len(text)
    while i < n:
        kind, end, _ = skip(text, i)
        if kind == "code":
            code.append(text[i])
            i = end
            continue
        out.append(_subs("".join(code)))
        code = []
        out.append(text[i:end])
        i = end
    out.append(_subs("".join(code)))
    return "".join(out)


def _subs(code: str) -> str:
    for pattern, repl in _CODE_SUBS:
        code = pattern.sub(repl, code)
    return code


_FIRST_WORD = re.compile(r"^\s*\(*\s*(\w+)")


def classify(sql: str) -> Translated:
    """Sort one statement: data (None to the caller) or catalog (translated); raise for refused ones."""
    m = _FIRST_WORD.match(sql)
    if not m or m.group(1).lower() not in ("select", "with", "values", "table"):
        return Translated("data")
    text = _prepare(sql)
    try:
        tree = sqlglot.parse_one(text, read="postgres")
    except Exception:
        return Translated("data")      # the Session reports its own syntax error
    if not isinstance(tree, exp.Query):
        return Translated("data")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    catalog, data = [], []
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue                    # a table function: checked with the functions
        name, schema = table.name.lower(), table.db.lower()
        if table.catalog:
            data.append(table)
        elif not schema and name in ctes:
            continue
        elif schema in ("", "pg_catalog") and ("pg_catalog", name) not in RELATIONS and (
                name in _BLOCKED or name.startswith(_BLOCKED_PREFIXES)):
            raise _refuse(f"pg_catalog.{name}", "it holds statistics about the data or server secrets")
        elif schema in ("", "pg_catalog") and ("pg_catalog", name) in RELATIONS:
            catalog.append((table, RELATIONS[("pg_catalog", name)]))
        elif schema == "pg_catalog" or (not schema and name.startswith("pg_")):
            raise _refuse(f"pg_catalog.{name}", "dpsql does not emulate this catalog relation")
        elif schema == "information_schema":
            rel = RELATIONS.get(("information_schema", name))
            if rel is None:
                raise _refuse(f"information_schema.{name}", "dpsql does not emulate this view")
            catalog.append((table, rel))
        else:
            data.append(table)
    _check_functions(tree)
    if data and catalog:
        raise _refuse("a query mixing catalog relations with data tables",
                      "catalog queries may read only pg_catalog and information_schema")
    if data:
        return Translated("data")
    _check_bounded(tree)
    for col in tree.find_all(exp.Column):
        if col.name.lower() in SECRET_COLUMNS:
            raise _refuse(col.name, "password hashes are never shown")
    for table, rel in catalog:
        alias = table.alias or (table.name if not table.db else None)
        new = sqlglot.parse_one(duck_table(rel), into=exp.Table, read="duckdb")
        table.set("this", new.this)
        table.set("db", new.args.get("db"))
        table.set("catalog", new.args.get("catalog"))
        if not table.alias:
            # keep columns qualified by the relation name (pg_class.relname) resolving
            table.set("alias", exp.TableAlias(this=exp.to_identifier(alias or rel.name)))
    names = _output_names(tree)
    if catalog:
        _qualify_relation_columns(tree, {rel.name for _, rel in catalog})
    tree = _postorder(tree, _rewrite)
    sources = _sources(tree)
    return Translated("catalog", tree.sql(dialect="duckdb"), sources, names)


def _postorder(tree: exp.Expression, fn) -> exp.Expression:
    """Rewrite children before their parents (a rewritten parent may copy its children)."""
    for node in reversed(list(tree.dfs())):
        new = fn(node)
        if new is not node:
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return tree


def _qualify_relation_columns(tree: exp.Expression, names: set[str]) -> None:
    """pg_catalog.pg_class.relname: the pg_catalog qualifier is gone already; drop a db part if any."""
    for col in tree.find_all(exp.Column):
        if col.args.get("db") is not None and col.table.lower() in names:
            col.set("db", None)


def _func_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower()


def _check_functions(tree: exp.Expression) -> None:
    for node in tree.find_all(exp.Func):
        name = _func_name(node)
        if name in _DATA_FUNCTIONS or name.startswith(_DATA_FUNCTION_PREFIXES):
            raise _refuse(f"function {name}", "it reads data, files or other databases")
        if _REFUSED_TYPED and isinstance(node, _REFUSED_TYPED):
            raise _refuse(f"function {name}", "it reads files")
        if isinstance(node, exp.Anonymous) and name not in _FUNCTIONS:
            raise _refuse(f"function {name}", "it is not available in dpsql's emulated catalog")
    for node in tree.find_all(exp.Dot):
        if isinstance(node.expression, exp.Func):
            raise _refuse(f"function {node.sql()}", "it is not available in dpsql's emulated catalog")


# -- bounded work ------------------------------------------------------------------------------------
#
# A catalog query runs on the server's own DuckDB, so it must not be a way to make the server work
# or allocate without bound (issue 12). Three layers, of which this is the first:
#   1. here, before anything runs: only functions drivers' catalog queries use (an allow-list;
#      everything else is refused), the few that generate rows or repeat a string only in forms
#      whose output is bounded by their input, no recursive CTEs, no long literals;
#   2. catalog.py: a time limit and a row limit on every catalog query ([server] catalog_timeout,
#      catalog_max_rows), and cancel on CancelRequest, disconnect and shutdown;
#   3. server.py: a per-analyst limit on queries in flight ([server] max_concurrent_queries).
# What the allow-list leaves possible (joins of catalog relations, || of strings, aggregates) is
# linear in the rows read, which layer 2 bounds in time and DuckDB's memory_limit in space.

# sqlglot's typed functions a catalog query may call: logic, casts, aggregates and window
# functions over the rows read, array and string functions whose output is no larger than their
# input, and the session's constants. Anything else (repeat, lpad/rpad, format, range, sequence,
# string_to_array, regexp_split_*, md5, ...) is refused: no driver's catalog query uses it.
_BOUNDED_TYPED = frozenset({
    "And", "Or", "Xor", "Case", "If", "Coalesce", "Nullif", "Greatest", "Least", "Exists", "Cast", "TryCast",
    "Count", "Min", "Max", "Sum", "Avg", "LogicalAnd", "LogicalOr", "ArrayAgg", "RowNumber", "Rank", "DenseRank",
    "Array", "ArraySize", "ArrayContains", "ArrayContainsAll", "ArrayOverlaps", "ArrayConcat", "ArrayPosition",
    "Lower", "Upper", "Length", "Substring", "Trim", "Left", "Right", "SplitPart", "StrPosition", "RegexpLike",
    "RegexpILike", "StartsWith", "Concat", "Translate", "Abs", "Round", "Floor", "Ceil",
    "CurrentDatabase", "CurrentCatalog", "CurrentSchema", "CurrentSchemas", "CurrentUser", "SessionUser",
    "CurrentVersion", "CurrentTimestamp", "CurrentDate", "Extract",
    # checked further below: they generate rows or repeat a string
    "Explode", "Unnest", "ExplodingGenerateSeries", "GenerateSeries", "GroupConcat", "ArrayToString",
    "ConcatWs", "Replace",
})
_ROW_GENERATORS = ("ExplodingGenerateSeries", "GenerateSeries")
# Functions that give the length of an array: generate_series(0|1, array_upper(arr, 1)) is the
# only series drivers ask for (psql \d+, JDBC's type lookup), and it has one row per element.
_ARRAY_BOUNDS = ("array_upper", "array_length", "cardinality")
_PG_NAMES = {"pad": "lpad/rpad", "exploding_generate_series": "generate_series", "group_concat": "string_agg",
             "explode": "unnest", "time_to_str": "to_char"}
MAX_LITERAL_CHARS = 1024          # longest string literal in a catalog query (names are <= 63 bytes)
MAX_SEPARATOR_CHARS = 16          # longest separator of string_agg / array_to_string / concat_ws


def _refuse_unbounded(what: str, reason: str) -> QueryRejected:
    return _refuse(what, reason + "; the emulated catalog runs only bounded queries")


def _check_bounded(tree: exp.Expression) -> None:
    """Refuse what could make a catalog query work or allocate without bound (see above)."""
    for w in tree.find_all(exp.With):
        if w.args.get("recursive"):
            raise _refuse_unbounded("WITH RECURSIVE", "a recursive query can run forever")
    for lit in tree.find_all(exp.Literal, *_STRINGS):
        if _is_string_literal(lit) and len(lit.this) > MAX_LITERAL_CHARS:
            raise _refuse_unbounded("a string literal", f"literals are limited to {MAX_LITERAL_CHARS} characters")
    for node in tree.find_all(exp.Func):
        kind = type(node).__name__
        if isinstance(node, exp.Anonymous):
            continue                    # checked against _FUNCTIONS by _check_functions
        if kind not in _BOUNDED_TYPED:
            name = _func_name(node)
            raise _refuse_unbounded(f"function {_PG_NAMES.get(name, name)}", "it is not among the functions "
                                    "catalog queries may use")
        if kind in _ROW_GENERATORS:
            _check_series(node)
        elif kind == "GroupConcat":
            _check_separator(node, "string_agg", node.args.get("separator"))
        elif kind == "ArrayToString":
            _check_separator(node, "array_to_string", node.args.get("expression"))
            _check_separator(node, "array_to_string", node.args.get("null"))
        elif kind == "ConcatWs":
            _check_separator(node, "concat_ws", (node.expressions or [None])[0])
        elif kind == "Replace":
            _check_replace(node)


_STRINGS = tuple(getattr(exp, n) for n in ("ByteString", "National", "RawString", "HexString", "BitString")
                 if hasattr(exp, n))


def _is_string_literal(node) -> bool:
    """'text', E'text' (an escape string), N'text' and the like."""
    if isinstance(node, exp.Literal):
        return node.is_string
    return isinstance(node, _STRINGS) and isinstance(node.this, str)


def _check_series(node: exp.Func) -> None:
    """generate_series(n, array_upper(arr, 1)) with 0 <= n: at most one row per array element
    (the array exists already, so the series is no larger than it). Any other series refused."""
    start, end, step = node.args.get("start"), node.args.get("end"), node.args.get("step")
    ok_start = isinstance(start, exp.Literal) and not start.is_string and start.this.isdigit()
    ok_end = isinstance(end, exp.Anonymous) and str(end.this).lower() in _ARRAY_BOUNDS
    if isinstance(end, exp.ArraySize):
        ok_end = True
    if not (ok_start and ok_end and step is None):
        raise _refuse_unbounded("function generate_series", "only generate_series(n, array_upper(array, 1)) "
                                "over an existing array is answered")


def _check_separator(node: exp.Func, name: str, sep: exp.Expression | None) -> None:
    """A separator is repeated once per element: a short literal keeps the output within a small
    multiple of the input."""
    if sep is None:
        return
    if not (_is_string_literal(sep) and len(sep.this) <= MAX_SEPARATOR_CHARS):
        raise _refuse_unbounded(f"function {name}", f"its separator must be a literal of at most "
                                f"{MAX_SEPARATOR_CHARS} characters")


def _check_replace(node: exp.Func) -> None:
    """replace(s, from, to) repeats `to` once per match: only with literal from/to, `to` at most
    twice as long as `from`, and an `s` made of literals, parameters and session constants (no
    column, subquery or other replace), so its output is at most twice a value the client sent.
    JDBC's getSchemas uses replace((current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_')."""
    frm, to = node.args.get("expression"), node.args.get("replacement")
    ok = _is_string_literal(frm) and _is_string_literal(to) and frm.this and len(to.this) <= 2 * len(frm.this)
    inner = node.this
    if ok and inner is not None:
        ok = not any(isinstance(n, (exp.Column, exp.Query, exp.Subquery, exp.Replace, exp.AggFunc))
                     for n in inner.walk())
    if not ok:
        raise _refuse_unbounded("function replace", "it is answered only with literal arguments that cannot "
                                "grow the text")


def _is_textual(node: exp.Expression) -> bool:
    if isinstance(node, (exp.Literal, exp.Placeholder, exp.Parameter)):
        return not (isinstance(node, exp.Literal) and not node.is_string)
    if isinstance(node, exp.Cast):
        return node.to.is_type(*exp.DataType.TEXT_TYPES) or _is_textual(node.this)
    if isinstance(node, exp.Null):
        return True
    if isinstance(node, exp.Anonymous) and str(node.this).lower().startswith("_pg_null"):
        return True
    return False


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        target = _FUNCTIONS.get(name, name)
        if name in _CONSTANT_FUNCTIONS:
            return _constant(name)
        target = target or name
        if target in _BY_ARITY:
            target = f"{target}{len(node.expressions)}"
        node.set("this", target)
        return node
    if isinstance(node, exp.CurrentUser) or isinstance(node, exp.SessionUser):
        return exp.Anonymous(this="_pg_user", expressions=[])
    if isinstance(node, exp.CurrentSchema):
        return exp.Literal.string("public")
    if isinstance(node, exp.CurrentSchemas):
        include = node.this
        implicit = isinstance(include, exp.Boolean) and include.this
        items = (["pg_catalog"] if implicit else []) + ["public"]
        return exp.Array(expressions=[exp.Literal.string(x) for x in items])
    if type(node).__name__ == "CurrentVersion":
        return exp.Anonymous(this="_pg_version", expressions=[])
    if type(node).__name__ in ("CurrentCatalog", "CurrentDatabase"):
        return exp.Anonymous(this="_pg_database", expressions=[])
    if isinstance(node, exp.Cast):
        return _rewrite_cast(node)
    if isinstance(node, (exp.EQ, exp.NEQ)) and isinstance(node.expression, (exp.Any, exp.All)):
        arr = node.expression.this
        if isinstance(arr, exp.Paren):
            arr = arr.this
        if not isinstance(arr, exp.Query):
            found = exp.Anonymous(this="list_contains", expressions=[arr.copy(), node.this.copy()])
            if isinstance(node.expression, exp.Any):
                return found if isinstance(node, exp.EQ) else exp.Not(this=exp.Anonymous(
                    this="list_has_all", expressions=[arr.copy(), exp.Array(expressions=[node.this.copy()])]))
            return exp.Not(this=found) if isinstance(node, exp.NEQ) else node
    if isinstance(node, (exp.EQ, exp.NEQ)):
        for side in ("this", "expression"):
            lit = node.args.get(side)
            if isinstance(lit, exp.Literal) and lit.is_string and re.fullmatch(r"\{[^{}]*\}", lit.this):
                node = node.copy()
                node.set(side, exp.Literal.string("[" + lit.this[1:-1] + "]"))
    return node


def _constant(name: str) -> exp.Expression:
    values = {"pg_backend_pid": exp.Literal.number(1), "pg_is_in_recovery": exp.false(),
              "inet_server_port": exp.Null(), "inet_server_addr": exp.Null(),
              "pg_postmaster_start_time": exp.Null(), "txid_current": exp.Literal.number(1)}
    if name == "pg_get_keywords":
        raise _refuse("function pg_get_keywords", "it is not available in dpsql's emulated catalog")
    return values[name]


def _rewrite_cast(node: exp.Cast) -> exp.Expression:
    to = node.to
    kind = None
    if isinstance(to, exp.ObjectIdentifier):
        kind = to.name.upper()
    elif isinstance(to, exp.DataType) and to.this == exp.DataType.Type.USERDEFINED:
        kind = to.args.get("kind").name.upper() if to.args.get("kind") is not None else None
    elif isinstance(to, exp.DataType) and to.this == exp.DataType.Type.NAME:
        kind = "NAME"
    if kind is None:
        return node
    if kind in _REG_CASTS:
        inward, outward = _REG_CASTS[kind]
        if _is_textual(node.this):
            return exp.Anonymous(this=inward, expressions=[node.this.copy()])
        if outward is None:
            return node.this.copy()
        return exp.Anonymous(this=outward, expressions=[node.this.copy()])
    alias = _TYPE_ALIASES.get(kind.lower())
    if alias is None:
        return node
    return exp.Cast(this=node.this.copy(), to=exp.DataType.build(alias, dialect="duckdb"))


def _sources(tree: exp.Expression) -> tuple[str | None, ...]:
    """Per output column of the outermost SELECT: the catalog column it shows unchanged, if any."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select):
        return ()
    out = []
    for e in select.expressions:
        inner = e.this if isinstance(e, exp.Alias) else e
        out.append(inner.name.lower() if isinstance(inner, exp.Column) and not isinstance(inner.this, exp.Star)
                   else None)
    if any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
           for e in select.expressions):
        return ()
    return tuple(out)


def _output_names(tree: exp.Expression) -> tuple[str, ...]:
    """Output column names by PostgreSQL's rules (FigureColname); () when a * hides them."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select):
        return ()
    names = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            return ()
        names.append(_figure_name(e) or "?column?")
    return tuple(names)


def _figure_name(e: exp.Expression) -> str | None:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Paren):
        return _figure_name(e.this)
    if isinstance(e, exp.Cast):
        inner = _figure_name(e.this)
        if inner:
            return inner
        to = e.to
        if isinstance(to, exp.ObjectIdentifier):
            return to.name.lower()
        kind = to.args.get("kind") if isinstance(to, exp.DataType) else None
        return kind.name.lower() if kind is not None else _PG_TYPE_NAMES.get(to.this, None) if isinstance(
            to, exp.DataType) else None
    if isinstance(e, exp.Case):
        return "case"
    if isinstance(e, exp.Array):
        return "array"
    if isinstance(e, exp.Subquery):
        inner = e.this
        return _figure_name(inner.expressions[0]) if isinstance(inner, exp.Select) and inner.expressions else None
    if isinstance(e, exp.Bracket):
        return _figure_name(e.this)
    if isinstance(e, exp.Dot):
        return e.expression.name if isinstance(e.expression, exp.Identifier) else None
    if isinstance(e, exp.Anonymous):
        return str(e.this).lower()
    if isinstance(e, (exp.CurrentUser, exp.SessionUser, exp.CurrentSchema, exp.CurrentSchemas)):
        return {exp.CurrentUser: "current_user", exp.SessionUser: "session_user",
                exp.CurrentSchema: "current_schema", exp.CurrentSchemas: "current_schemas"}[type(e)]
    if type(e).__name__ in ("CurrentVersion", "CurrentCatalog", "CurrentDatabase"):
        return {"CurrentVersion": "version", "CurrentCatalog": "current_catalog",
                "CurrentDatabase": "current_database"}[type(e).__name__]
    if isinstance(e, exp.Boolean):
        return "bool"
    if isinstance(e, exp.Func) and not isinstance(e, (exp.Binary, exp.Unary)) and not isinstance(e, exp.Predicate):
        return e.sql_name().lower()
    return None


_PG_TYPE_NAMES = {exp.DataType.Type.TEXT: "text", exp.DataType.Type.VARCHAR: "varchar",
                  exp.DataType.Type.INT: "int4", exp.DataType.Type.BIGINT: "int8", exp.DataType.Type.SMALLINT: "int2",
                  exp.DataType.Type.BOOLEAN: "bool", exp.DataType.Type.NAME: "name"}
