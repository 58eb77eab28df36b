"""Which tables a query reads, before its analysis: schema-qualified names read as the plain ones
(qualified_names), protected tables by policy name or `source` (policy_table), public tables checked
against the policy (check_public), and the connection's collation (check_collation)."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.analysis.suggest import table_hint
from dpsql.analysis.suggest import undeclared_table_hint as _or_ask
from dpsql.errors import QueryRejected, UndefinedTable
from dpsql.policy import Policy, TablePolicy

if TYPE_CHECKING:
    from dpsql.analysis.analyze import Schema


_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")



def _ident(node: exp.Expression | None) -> str | None:
    """A name part as PostgreSQL reads it: unquoted folded to lower case, quoted kept exactly."""
    if not isinstance(node, exp.Identifier):
        return None
    return node.this if node.args.get("quoted") else node.this.lower()



def _engine_name(ref: str, namespace: tuple[str, str | None]) -> tuple[str | None, str, str] | None:
    """A protected table's engine reference (its `source` or name) as (catalog, schema, table), the
    engine's schema filled in for a plain name; None for a file source (not a plain name)."""
    parts = ref.lower().split(".")
    if len(parts) > 3 or not all(_PLAIN_NAME.fullmatch(p) for p in parts):
        return None
    parts = [namespace[0]] * (len(parts) == 1) + parts
    return (parts[0] if len(parts) == 3 else None, parts[-2], parts[-1])



def qualified_names(tree: exp.Expression, policy: Policy, schema: Schema) -> exp.Expression:
    """Schema-qualified table names (`public.people`, `"public"."people"`, DuckDB's `main.people`
    and `people.main.people`, and columns qualified the same way, as Metabase writes them) read as
    the plain name, when they name the very table the plain name reads; refused otherwise.

    Why this is the same query, with the same guarantee: the engine reads a plain table name from
    one schema (PostgreSQL: the search_path dpsql sets, that schema then pg_temp; DuckDB: `main` of
    the database it opened), reported by Engine.namespace, and every fact dpsql relies on (the
    policy's tables, their columns and keys, the base tables and views a public query may read) is
    read from there. A name qualified by that schema (and, if it has one, by that database's name
    as its catalog) names the table the plain name names, with one exception each way, both
    refused: the plain name may read another table (a protected table whose `source` is in another
    schema or is a file, or whose policy name is not its engine name: `staff` read from
    `staff_raw`), and a plain name may be a CTE of the query, which a qualified name never is. A
    protected table whose source names its schema (`analytics.visits_raw`) is named by that schema.
    Any other schema or catalog fails closed: `other.people` is a table dpsql has no facts about,
    neither the protected `people` nor a public table, whatever its name. Quoted parts must match
    exactly, unquoted ones are folded to lower case as PostgreSQL folds them. Engines that report
    no namespace (Spark) have every qualified name refused."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    ns = schema.namespace

    def refuse(written: str, why: str) -> QueryRejected:
        where = f"{ns[0]}" if ns is not None else "the database's default schema"
        return QueryRejected(f"the qualified table name {written}", why,
                             f"name the table plainly ({written.rsplit('.', 1)[-1]})"
                             + (f" or by the schema it is read from ({where}.TABLE)" if ns is not None else ""))

    def plain(t: exp.Expression) -> str | None:
        """The plain name a qualified table (or a column's table part) stands for, or None."""
        parts = [t.args.get(k) for k in ("catalog", "db", "this" if isinstance(t, exp.Table) else "table")]
        written = ".".join(p.sql("postgres") for p in parts if p is not None)
        if ns is None:
            raise refuse(written, "dpsql reads tables from the database's default schema only")
        catalog, sch, name = (_ident(p) for p in parts)
        if name is None or sch is None or (parts[0] is not None and catalog is None):
            raise refuse(written, "it is not a plain table name")
        if catalog is not None and catalog != (ns[1] or "").lower() and catalog != ns[1]:
            raise refuse(written, f"{catalog!r} is not the database dpsql reads")
        for t_pol in policy.tables.values():
            ref = _engine_name(t_pol.source or t_pol.name, ns)
            if ref is not None and ref[1:] == (sch, name) and (ref[0] is None or catalog in (None, ref[0])):
                short = ref[2]
                if policy_table(policy, short) is not t_pol or short in ctes:
                    raise refuse(written, "its plain name would read another table")
                return short
        if sch != ns[0]:
            raise refuse(written, f"dpsql reads tables from the schema {ns[0]!r} only; a table of another "
                         "schema is not described by the policy, whatever its name")
        if policy_table(policy, name) is not None:
            raise refuse(written, "the policy reads the protected table of that name from another table "
                         "(its source)")
        if name in ctes:
            raise refuse(written, "a qualified name names a table, and the query has a CTE of that name")
        return name

    def one(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and (node.args.get("db") or node.args.get("catalog")):
            name = plain(node)
            out = node.copy()
            out.set("db", None)
            out.set("catalog", None)
            out.set("this", exp.to_identifier(name))
            return out
        if isinstance(node, exp.Column) and (node.args.get("db") or node.args.get("catalog")):
            plain(node)
            out = node.copy()
            out.set("db", None)
            out.set("catalog", None)
            return out
        return node
    return tree.transform(one)



def check_collation(schema: Schema) -> None:
    """Refuse every private query when the engine compares text without a collation of its own
    by one that is not bytewise (DuckDB's default_collation, on a connection its owner passed in:
    TableFacts.collation, checked again in each query's transaction). Then not only a column's
    values but the query's literals (a CASE key 'A' or 'a') and dpsql's own texts (the keys the
    parts of a query are joined on, rewrite/keys.py) would be held equal when they differ, and a
    group shown with the spelling of the first row met: bind.exact_equality has the argument."""
    for facts in schema.facts.values():
        collation = getattr(facts, "collation", None)
        if collation:
            raise QueryRejected("private queries on this connection",
                                f"its default collation ({collation}) holds different texts equal, so the engine "
                                "could merge groups and show the spelling of whichever row it meets first: the "
                                "answer could reveal one person's row",
                                "ask the connection's owner to RESET default_collation (dpsql's own connections "
                                "keep the binary default)")



def table_name(t: exp.Table) -> str | None:
    return t.this.name.lower() if isinstance(t.this, exp.Identifier) else None



def policy_table(policy: Policy, name: str) -> TablePolicy | None:
    """The protected table a reference names: by its policy name or by its `source`."""
    table = policy.table(name)
    if table is not None:
        return table
    for t in policy.tables.values():
        if t.source and t.source.lower().split(".")[-1] == name:
            return t
    return None



def check_public(name: str, policy: Policy, schema: Schema) -> None:
    """A table that is not protected may be read only if it is a base table the policy declares
    public. The declaration is checked first: a table the policy does not mention is refused with
    the same message whether or not it exists."""
    if name in schema.views:
        raise QueryRejected(f"the view {name!r}", "a view may read protected tables; query the tables themselves")
    others = schema.base_tables if policy.public.undeclared == "public" else ()
    if not policy.is_public(name):
        raise QueryRejected(f"the table {name!r}", "the policy does not declare it public",
                            _or_ask(table_hint(name, policy, others)))
    if name not in schema.base_tables:
        raise UndefinedTable(f"the table {name!r}", "no such table", table_hint(name, policy, others))
