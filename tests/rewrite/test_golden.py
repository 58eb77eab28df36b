"""Golden tests of the rewritten SQL: tests/golden/<dialect>/*.sql.

Each file: `-- title:` and `-- policy:` headers, the analyst's SQL ending with `;`, then
the expected rewrite, pretty-printed. `pytest --update-golden` rewrites the expected part;
review the diff. tests/integration/test_golden_run.py runs every golden on its engine.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.parse import classify
from dpsql.datagen import demo_policy
from dpsql.policy import load_policy
from dpsql.rewrite import to_sql

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

_PEOPLE = {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR", "sex": "VARCHAR",
           "education": "VARCHAR"}
_VISITS = {"visit_id": "BIGINT", "person_id": "BIGINT", "visit_date": "DATE", "state": "VARCHAR",
           "cost": "DOUBLE", "kind": "VARCHAR"}


_REGIONS = {"state": "VARCHAR", "region": "VARCHAR"}
REGIONS = ("East", "South", "West")      # the test data's regions (tests/conftest.make_people_db)


def _policy(name: str):
    pol = demo_policy(ledger="unused.sqlite")
    pk = dict(pol["tables"]["people"])
    pol["tables"]["people_pk"] = pk
    pol["public"] = {"tables": ["regions"]}
    if name == "demo_sa":       # sample-and-aggregate allowed (dpsql.analysis.sample_aggregate)
        pol["functions"] = {"sample_aggregate": ["corr", "covar_pop", "regr_slope"], "blocks": 8,
                            "regr_slope": {"lower": -1000, "upper": 10000}}
    elif name != "demo":
        raise KeyError(name)
    return load_policy(pol)


SCHEMA = Schema({"people": _PEOPLE, "people_pk": _PEOPLE, "visits": _VISITS}, frozenset({"people_pk"}),
                frozenset({"people", "people_pk", "visits", "regions"}), not_null_units=frozenset({"people_pk"}),
                public={"regions": _REGIONS})
SETTINGS = Settings(1.0, 1e-8, "laplace")


def _cases():
    for path in sorted(GOLDEN.glob("*/*.sql")):
        yield pytest.param(path, id=f"{path.parent.name}/{path.stem}")


def _split(text: str) -> tuple[dict, str, str]:
    headers, body = {}, []
    for line in text.splitlines():
        if line.startswith("-- ") and ":" in line and not body:
            k, v = line[3:].split(":", 1)
            headers[k.strip()] = v.strip()
        else:
            body.append(line)
    query, _, expected = "\n".join(body).partition(";\n")
    return headers, query.strip(), expected.strip()


@pytest.mark.parametrize("path", list(_cases()))
def test_golden(path: Path, update_golden: bool):
    headers, query, expected = _split(path.read_text())
    dialect = path.parent.name
    plan = analyze(classify(query).tree, _policy(headers["policy"]), SCHEMA, SETTINGS, dialect,
                   lambda table, column: REGIONS)
    got = to_sql(plan, dialect, pretty=True)
    if update_golden:
        head = "".join(f"-- {k}: {v}\n" for k, v in headers.items())
        path.write_text(f"{head}{query};\n{got}\n")
        return
    assert got == expected, f"{path.name}: rewrite changed; run pytest --update-golden and review the diff"


def test_there_are_goldens():
    assert len(list(_cases())) >= 8
