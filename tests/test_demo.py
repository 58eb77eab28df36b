"""dpsql.demo: the demo database and policy are built once, whole, where the user's data lives."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import duckdb
import pytest

from dpsql import demo
from dpsql.policy import load_policy

STATES = ["CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"]


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("DPSQL_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert demo.data_dir() == tmp_path / "home" / ".local" / "share" / "dpsql"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert demo.data_dir() == tmp_path / "xdg" / "dpsql"
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "dpsql-home"))
    assert demo.data_dir() == tmp_path / "dpsql-home"


def test_creates_database_and_policy(tmp_path):
    db, policy = demo.ensure_demo(tmp_path)
    assert (db, policy) == (tmp_path / "demo" / "demo.duckdb", tmp_path / "demo" / "policy.toml")
    assert db.is_file() and policy.is_file()
    assert not list((tmp_path / "demo").glob(".tmp-*"))
    assert not Path(f"{db}.wal").exists()
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*), max(person_id) FROM people").fetchone() == (20_000, 20_000)
        assert con.execute("SELECT count(*) FROM visits").fetchone()[0] > 40_000
    finally:
        con.close()


def test_policy_toml_structure(tmp_path):
    _, path = demo.ensure_demo(tmp_path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#")                                   # the explanatory header
    data = tomllib.loads(text)
    assert data["budget"] == {"epsilon": 10.0, "delta": 1e-6, "ledger": "budget.sqlite", "accountant": "zcdp"}
    assert data["defaults"] == {"epsilon": 0.5, "mechanism": "gaussian", "rho": 0.05}
    people, visits = data["tables"]["people"], data["tables"]["visits"]
    assert {k: v for k, v in people.items() if k != "columns"} == {
        "privacy_unit": "person_id", "max_rows_per_unit": 1, "max_groups_per_unit": 1}
    assert people["columns"] == {
        "age": {"lower": 0, "upper": 120},
        "income": {"lower": 0, "upper": 500000},
        "state": {"values": STATES},
        "sex": {"values": ["F", "M"]},
        "education": {"values": ["none", "high_school", "bachelor", "master", "phd"]},
    }
    assert {k: v for k, v in visits.items() if k != "columns"} == {
        "privacy_unit": "person_id", "max_rows_per_unit": 5, "max_groups_per_unit": 2}
    assert visits["columns"]["cost"] == {"lower": 0, "upper": 2000}
    assert visits["columns"]["state"] == {"values": STATES}
    assert sorted(visits["columns"]["kind"]["values"]) == ["checkup", "emergency", "lab", "specialist"]
    assert visits["columns"]["visit_date"] == {"lower": datetime.date(2023, 1, 1), "upper": datetime.date(2024, 12, 31)}
    loaded = load_policy(path)                                   # dpsql's own reader accepts it
    assert loaded.budget.ledger == path.resolve().parent / "budget.sqlite"


def test_second_call_does_not_rebuild(tmp_path):
    db, policy = demo.ensure_demo(tmp_path)
    stamps = (db.stat().st_mtime_ns, db.stat().st_ino, policy.stat().st_mtime_ns, policy.stat().st_ino)
    assert demo.ensure_demo(tmp_path) == (db, policy)
    assert stamps == (db.stat().st_mtime_ns, db.stat().st_ino, policy.stat().st_mtime_ns, policy.stat().st_ino)


def test_a_missing_policy_is_rewritten_without_rebuilding_the_database(tmp_path):
    db, policy = demo.ensure_demo(tmp_path)
    inode = db.stat().st_ino
    policy.unlink()
    demo.ensure_demo(tmp_path)
    assert policy.is_file() and db.stat().st_ino == inode


def test_leftovers_of_a_crashed_build_are_removed(tmp_path):
    root = tmp_path / "demo"
    root.mkdir()
    (root / ".tmp-deadbeef-demo.duckdb").write_bytes(b"half a database")
    db, _ = demo.ensure_demo(tmp_path)
    assert not list(root.glob(".tmp-*"))
    duckdb.connect(str(db), read_only=True).close()


def test_a_failed_build_leaves_no_demo(monkeypatch, tmp_path):
    import dpsql.datagen

    def fail_midway(con, people, **kwargs):
        con.execute("CREATE TABLE people AS SELECT 1 AS person_id")
        raise RuntimeError("crash")

    monkeypatch.setattr(dpsql.datagen, "generate", fail_midway)
    with pytest.raises(RuntimeError):
        demo.ensure_demo(tmp_path)
    assert not (tmp_path / "demo" / "demo.duckdb").exists()
    assert not list((tmp_path / "demo").glob(".tmp-*"))
    monkeypatch.undo()
    db, _ = demo.ensure_demo(tmp_path)
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM people").fetchone() == (20_000,)
    finally:
        con.close()


def test_dpsql_home_is_honoured(monkeypatch, tmp_path):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    db, policy = demo.ensure_demo()
    assert db == tmp_path / "home" / "demo" / "demo.duckdb" and db.is_file()
    assert policy == tmp_path / "home" / "demo" / "policy.toml" and policy.is_file()


def test_policy_toml_escapes_and_rejects():
    text = demo.policy_toml({"budget": {"epsilon": 1.0, "ledger": 'a "b"\\c\n\x7f'},
                             "tables": {"odd name": {"privacy_unit": "id", "columns": {
                                 "flag": {"identifier": True}, "k": {"values": [1, "é"]}}}}})
    data = tomllib.loads(text)
    assert data["budget"]["ledger"] == 'a "b"\\c\n\x7f'
    assert data["tables"]["odd name"]["columns"] == {"flag": {"identifier": True}, "k": {"values": [1, "é"]}}
    with pytest.raises(ValueError):
        demo.policy_toml({"budget": {"epsilon": float("inf")}})
    with pytest.raises(ValueError):
        demo.policy_toml({"budgets": {}})


def test_concurrent_first_calls(tmp_path):
    """Two processes start on an empty directory at once: both succeed, one whole demo remains."""
    root = Path(demo.__file__).resolve().parents[1]
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from dpsql.demo import ensure_demo
        db, policy = ensure_demo(Path(sys.argv[1]))
        print(db)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        assert out.strip() == str(tmp_path / "demo" / "demo.duckdb")
    assert not list((tmp_path / "demo").glob(".tmp-*"))
    con = duckdb.connect(str(tmp_path / "demo" / "demo.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM people").fetchone() == (20_000,)
    finally:
        con.close()
    tomllib.loads((tmp_path / "demo" / "policy.toml").read_text(encoding="utf-8"))


def test_policy_toml_writes_the_reconstruction_server_and_analyst_sections(tmp_path):
    from dpsql.datagen import demo_policy
    from dpsql.policy import load_policy
    pol = demo_policy(str(tmp_path / "l.sqlite"))
    pol["reconstruction"] = {"surcharge": 0.5, "max_subset_queries": 4, "cache_lifetime": "12h"}
    pol["server"] = {"auth": "trust"}
    pol["analysts"] = {"alice": {"epsilon": 2.0}, "bob.smith": {"delta": 1e-7}}
    path = tmp_path / "p.toml"
    path.write_text(demo.policy_toml(pol))
    loaded = load_policy(path)
    assert loaded.reconstruction.max_subset_queries == 4 and loaded.reconstruction.cache_lifetime == 43200
    assert loaded.server.auth == "trust"
    assert loaded.budget_for("alice").epsilon == 2.0 and loaded.budget_for("bob.smith").delta == 1e-7
