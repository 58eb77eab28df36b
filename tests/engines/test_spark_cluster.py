"""Beyond local mode: a standalone Spark master and one worker on loopback (spark-class from
the pyspark package), and the engine's core cases through spark://127.0.0.1:PORT.

One process holds one SparkContext and the test session's is local, so the queries run in a
child process that prints its results as JSON. The tables are Parquet files on this machine
(readable by the worker), named by the policy's `source`.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import export_parquet, file_types, policy_for

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"spark-class exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker (1 core, 1 GiB); both stopped afterwards."""
    try:
        import pyspark
    except ImportError as err:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"pyspark missing: {err}")
        pytest.skip(f"pyspark missing: {err}")
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_class.parents[1]),
               SPARK_WORKER_DIR=str(logs / "work"))
    port = _free_port()
    procs = []
    try:
        master = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", "0"], env=env,
                                  stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)
        procs.append(master)
        _wait_port(port, master)
        worker = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker",
                                   f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "1",
                                   "--memory", "1g", "--webui-port", "0"], env=env,
                                  stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)
        procs.append(worker)
        end = time.monotonic() + 60       # the worker has registered when the master says so
        while "Registering worker" not in (logs / "master.log").read_text() and time.monotonic() < end:
            if worker.poll() is not None:
                raise RuntimeError("the worker exited")
            time.sleep(0.3)
        yield f"spark://127.0.0.1:{port}", env
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


_CHILD = textwrap.dedent("""
    import json, sys
    import dpsql
    from dpsql.rewrite import SALT, to_sql
    from sqlglot import exp
    url, policy = sys.argv[1], json.loads(sys.argv[2])
    out = {}
    with dpsql.connect(url, policy=policy, analyst="alice", conf={"spark.executor.memory": "512m",
                       "spark.executor.cores": "1", "spark.cores.max": "1", "spark.sql.shuffle.partitions": "2",
                       "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}) as c:
        cur = c.cursor()
        out["master"] = c.session.engine._spark.sparkContext.master
        cur.execute("SELECT COUNT(*) FROM people")
        out["count"] = cur.fetchone()[0]
        cur.execute("SELECT state, SUM(cost) FROM visits GROUP BY state")
        out["sum_by_state"] = sorted(r[0] for r in cur.fetchall())
        out["selected"] = c.session.plan("SELECT kind, COUNT(*) FROM visits GROUP BY kind").selection is not None
        cur.execute("SELECT kind, COUNT(*) FROM visits GROUP BY kind")
        out["kinds"] = sorted(r[0] for r in cur.fetchall())
        session = c.session
        plan = session.plan("SELECT kind, COUNT(*) FROM visits GROUP BY kind")
        tree = exp.maybe_parse(to_sql(plan, "spark"), dialect="spark")
        inner = tree.find(exp.Subquery).this
        inner.select(exp.alias_(exp.column("_u"), "_pid"), copy=False)
        m = plan.measures[0].name
        check = (f"SELECT MAX(groups), MAX(kept), MAX(raw) FROM (SELECT _pid, COUNT(*) AS groups, "
                 f"MAX(LEAST({m}, {plan.table.max_rows_per_unit})) AS kept, MAX({m}) AS raw "
                 f"FROM ({inner.sql('spark')}) AS t WHERE _rank <= {plan.table.max_groups_per_unit} GROUP BY _pid) AS s")
        out["bounding"] = [list(session.engine.run(check, {SALT: s}).rows[0]) for s in (1, 2**62 + 11)]
        out["limits"] = [plan.table.max_groups_per_unit, plan.table.max_rows_per_unit]
    print("RESULT " + json.dumps(out))
""")


def test_core_cases_on_a_standalone_cluster(cluster, people_db, tmp_path):
    url, env = cluster
    files = export_parquet(people_db, tmp_path / "parquet")
    pol = policy_for(tmp_path)
    for name in ("people", "visits"):
        pol["tables"][name] = dict(pol["tables"][name], source=files[name], types=file_types(files[name]))
    pol["tables"].pop("people_pk")
    columns = dict(pol["tables"]["visits"]["columns"], kind={})     # no public domain: partition selection
    pol["tables"]["visits"] = dict(pol["tables"]["visits"], columns=columns)
    run = subprocess.run([sys.executable, "-c", _CHILD, url, json.dumps(pol, default=str)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    line = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    assert run.returncode == 0 and line, run.stderr[-3000:]
    out = json.loads(line[0][len("RESULT "):])
    assert out["master"] == url
    assert 1500 < out["count"] < 2500                               # 2000 people, noisy
    assert out["sum_by_state"] == ["CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"]   # the public domain
    assert out["selected"] and out["kinds"] == ["checkup", "emergency", "lab", "specialist"]   # hundreds each
    groups, rows = out["limits"]
    for max_groups, kept, raw in out["bounding"]:
        assert max_groups <= groups and kept <= rows < raw
