"""Client.results_chunked: one POST /results/batch per 1,000 ids, asked
lazily, and a wait only when one request is all there is (the request
itself is stood in for: this checks the splitting, not the server)."""
from __future__ import annotations

from kgym.client import RESULTS_CHUNK, Client


class Recorder(Client):
    def __init__(self):
        self.calls = []

    def results(self, task_ids, wait_s=0):
        self.calls.append((list(task_ids), wait_s))
        return {"results": [], "pending": [], "unknown": []}


def test_one_chunk_waits():
    c = Recorder()
    got = list(c.results_chunked([f"t{i}" for i in range(10)], wait_s=7))
    assert c.calls == [([f"t{i}" for i in range(10)], 7)] and len(got) == 1


def test_several_chunks_do_not_wait_and_are_asked_lazily():
    c = Recorder()
    ids = [f"t{i}" for i in range(2 * RESULTS_CHUNK + 500)]
    it = c.results_chunked(ids, wait_s=7)
    chunk, _ = next(it)
    assert chunk == ids[:RESULTS_CHUNK] and len(c.calls) == 1  # the rest not asked yet
    rest = list(it)
    assert [len(ch) for ch, _ in rest] == [RESULTS_CHUNK, 500]
    assert [w for _, w in c.calls] == [0.0, 0.0, 0.0]
    assert sum((ids_ for ids_, _ in c.calls), []) == ids
