"""Pass 3, group_choice (dpsql/rewrite/group_choice.py): a salted-hash rank of each unit's groups,
groups with a row passing the WHERE first, only when a unit could reach too many groups."""
from __future__ import annotations

from collections import defaultdict


def test_group_choice_adds_the_rank(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    assert plan.group_choice
    per_unit = passes.sql(plan, "per_unit")
    head, _, tail = per_unit.partition(" FROM (")
    assert passes.sql(plan, "group_choice") == (
        f"{head}, ROW_NUMBER() OVER (PARTITION BY _u ORDER BY HASH(_u, _g0, $salt), _g0) AS _rank FROM ({tail}")


def test_passing_groups_rank_first(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits WHERE cost > 100 GROUP BY kind")
    sql = passes.sql(plan, "group_choice")
    assert ("ROW_NUMBER() OVER (PARTITION BY _u ORDER BY CASE WHEN COUNT(*) FILTER(WHERE _h) > 0 THEN 0 ELSE 1 END, "
            "HASH(_u, _g0, $salt), _g0) AS _rank") in sql
    ranks = defaultdict(list)
    for u, g, v, hits, rank in passes.run(sql):
        ranks[u].append((rank, hits > 0))
    for u, rs in ranks.items():
        rs.sort()
        assert [r for r, _ in rs] == list(range(1, len(rs) + 1)), u            # a permutation per unit
        assert [p for _, p in rs] == sorted((p for _, p in rs), reverse=True), u   # passing groups first


def test_the_rank_depends_on_the_salt(passes):
    sql = passes.sql(passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind"), "group_choice")
    assert passes.run(sql, salt=1) != passes.run(sql, salt=2)
    assert passes.run(sql, salt=1) == passes.run(sql, salt=1)


def test_no_group_choice_without_groups(passes):
    plan = passes.plan("SELECT COUNT(*) FROM people")
    assert not plan.group_choice
    assert passes.sql(plan, "group_choice") == passes.sql(plan, "per_unit")
