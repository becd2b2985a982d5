"""POST /evaluate/batch against the result cache, on both stores: the
whole batch is looked up in the cache at once (kg_store_cache_get_many),
and each task is then answered as a single POST /evaluate would answer it.
A real `kgym serve` (the fixture of test_server_api.py) and a fake worker."""
from __future__ import annotations

from test_server_api import (lease_task, post_result, register, server,  # noqa: F401
                             task, uid)


def test_batch_answers_from_the_cache(server):
    t = task(kernel_code=uid("batch-cached"), seed=11)
    code, _, body = server.request("POST", "/evaluate", t)
    assert code == 200, body
    first = body["task_id"]
    wid = register(server)
    lease_task(server, wid, first)
    post_result(server, wid, first, "pass", speedup=2.5)

    named = uid()
    tasks = [t,                                # 0: cached, id from the server
             {**t, "task_id": named},          # 1: cached, under the client's id
             {**t, "task_id": first},          # 2: that id exists: it is the answer
             {**t, "force_refresh": True},     # 3: bypasses the cache
             task(),                           # 4: not in the cache
             {**t, "priority": "high", "timeout": 60},  # 5: same key: cached
             {**t, "num_perf_trials": 7}]      # 6: another key: not cached
    code, _, body = server.request("POST", "/evaluate/batch", {"tasks": tasks})
    assert code == 200, body
    assert body["accepted"] == 7 and body["rejected"] == 0
    e = body["tasks"]
    for i in (0, 1, 5):
        assert e[i]["cached"] is True and e[i]["status"] == "completed", e[i]
        assert e[i]["result"]["speedup"] == 2.5
        assert e[i]["result"]["task_id"] == e[i]["task_id"]
    assert e[1]["task_id"] == named
    assert len({e[0]["task_id"], e[5]["task_id"], first}) == 3
    assert e[2]["task_id"] == first and e[2]["existing"] is True
    assert e[2]["status"] == "completed" and e[2]["result"]["verdict"] == "pass"
    for i in (3, 4, 6):
        assert e[i]["status"] == "pending" and "cached" not in e[i], e[i]

    # tasks answered from the cache read back completed
    code, _, st = server.request("GET", f"/status/{named}")
    assert code == 200 and st["status"] == "completed" and st["verdict"] == "pass"
    code, _, r = server.request("GET", f"/results/{e[0]['task_id']}")
    assert code == 200 and r["speedup"] == 2.5

    # the pending ones run as usual
    for i in (3, 4, 6):
        lease_task(server, wid, e[i]["task_id"])
        post_result(server, wid, e[i]["task_id"], "mismatch")
    code, _, st = server.request("GET", f"/status/{e[3]['task_id']}")
    assert code == 200 and st["verdict"] == "mismatch"


def test_batch_all_invalid_or_empty_needs_no_lookup(server):
    code, _, body = server.request("POST", "/evaluate/batch",
                                   {"tasks": [{"kernel_code": "x"}, 7]})
    assert code == 200 and body["accepted"] == 0 and body["rejected"] == 2
    assert [x["status_code"] for x in body["tasks"]] == [400, 400]
