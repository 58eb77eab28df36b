"""Pass 3, group_choice (dpsql/rewrite/group_choice.py): a salted-hash rank of each unit's groups,
groups with a row passing the WHERE first, only when a unit could reach too many groups."""
from __future__ import annotations

from collections import defaultdict


ONE_WINDOW = "ROW_NUMBER() OVER (PARTITION BY _u ORDER BY {first}HASH(_u, _g0, $salt), _g0) AS _rank"


def _one_window(passes, plan, first: str = "") -> str:
    """The group choice as one window over every unit's groups (its form on Spark)."""
    per_unit = passes.sql(plan, "per_unit")
    return f"SELECT *, {ONE_WINDOW.format(first=first)} FROM ({per_unit}) AS _q"


def _kept(rows, l0: int) -> set:
    return {(u, g) for u, g, *_, rank in rows if rank <= l0}


def test_group_choice_ranks_only_units_with_more_than_l0_groups(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    assert plan.group_choice and plan.l0 == 2
    per_unit = passes.sql(plan, "per_unit")
    sql = passes.sql(plan, "group_choice")
    assert sql == (f"WITH _p AS ({per_unit}), _many AS (SELECT _u FROM _p GROUP BY _u HAVING COUNT(*) > 2) "
                   "SELECT _p.*, 1 AS _rank FROM _p LEFT JOIN _many ON _many._u = _p._u WHERE _many._u IS NULL "
                   f"UNION ALL SELECT _p.*, {ONE_WINDOW.format(first='')} FROM _p "
                   "WHERE _u IN (SELECT _u FROM _many)")
    rows = passes.run(sql)
    groups = defaultdict(list)
    for u, g, v, rank in rows:
        groups[u].append(rank)
    assert {len(rs) for rs in groups.values()} == {1, 2, 3, 4}          # units on both sides of L0
    for u, rs in groups.items():
        if len(rs) <= 2:
            assert rs == [1] * len(rs), u                                # all kept, no rank needed
        else:
            assert sorted(rs) == list(range(1, len(rs) + 1)), u         # a permutation per unit
    # the same groups kept as one window over every unit's groups, the same measures
    one = passes.run(_one_window(passes, plan))
    assert _kept(rows, 2) == _kept(one, 2)
    assert {r[:3] for r in rows if r[-1] <= 2} == {r[:3] for r in one if r[-1] <= 2}


def test_passing_groups_rank_first(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits WHERE cost > 100 GROUP BY kind")
    sql = passes.sql(plan, "group_choice")
    assert ("ROW_NUMBER() OVER (PARTITION BY _u ORDER BY CASE WHEN _p._hits > 0 THEN 0 ELSE 1 END, "
            "HASH(_u, _g0, $salt), _g0) AS _rank") in sql
    rows = passes.run(sql)
    ranks = defaultdict(list)
    for u, g, v, hits, rank in rows:
        ranks[u].append((rank, hits > 0))
    for u, rs in ranks.items():
        rs.sort()
        if len(rs) <= 2:
            assert [r for r, _ in rs] == [1] * len(rs), u
            continue
        assert [r for r, _ in rs] == list(range(1, len(rs) + 1)), u            # a permutation per unit
        assert [p for _, p in rs] == sorted((p for _, p in rs), reverse=True), u   # passing groups first
    one = passes.run(_one_window(passes, plan, "CASE WHEN _hits > 0 THEN 0 ELSE 1 END, "))
    assert _kept(rows, 2) == _kept(one, 2)


def test_spark_keeps_one_window(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits WHERE cost > 100 GROUP BY kind")
    sql = passes.sql(plan, "group_choice", "spark")
    assert "WITH" not in sql and "ROW_NUMBER() OVER (PARTITION BY _u ORDER BY CASE WHEN COUNT(*) FILTER" in sql


def test_the_rank_depends_on_the_salt(passes):
    sql = passes.sql(passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind"), "group_choice")
    assert passes.run(sql, salt=1) != passes.run(sql, salt=2)
    assert passes.run(sql, salt=1) == passes.run(sql, salt=1)


def test_no_group_choice_without_groups(passes):
    plan = passes.plan("SELECT COUNT(*) FROM people")
    assert not plan.group_choice
    assert passes.sql(plan, "group_choice") == passes.sql(plan, "per_unit")


def test_postgres_splits_only_from_its_least_l0(passes):
    """PostgreSQL: one window below an L0 of 16 (its extra hash aggregation is not repaid when
    many units exceed a small L0), the split from there on; DuckDB splits at every L0."""
    import dataclasses
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    assert plan.l0 == 2
    assert "WITH _p AS" not in passes.sql(plan, "group_choice", "postgres")
    assert "ROW_NUMBER() OVER (PARTITION BY _u" in passes.sql(plan, "group_choice", "postgres")
    assert "WITH _p AS" in passes.sql(plan, "group_choice")
    wide = dataclasses.replace(plan, l0=16)
    assert "WITH _p AS" in passes.sql(wide, "group_choice", "postgres")
