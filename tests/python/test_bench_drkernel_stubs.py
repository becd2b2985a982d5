"""bench/kernelgym_client/stubs: the Ray and verl stand-ins the drkernel
reward-client bench runs the paper's client with (no fetched code needed)."""
import importlib.util
import os
import sys
import threading
import time
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STUBS = os.path.join(ROOT, "bench", "kernelgym_client", "stubs")


def _load(name: str, path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def ray(monkeypatch):
    """A fresh stub per test, installed as `ray` for the verl stand-in."""
    mod = _load("ray_stub_under_test", os.path.join(STUBS, "ray_stub.py"))
    monkeypatch.setitem(sys.modules, "ray", mod)
    yield mod
    mod.abort_pending("test over")


def test_actor_methods_run_in_a_pool_of_max_concurrency(ray):
    @ray.remote
    class Counter:
        def __init__(self, start):
            self.n = start
            self.live = 0
            self.peak = 0
            self.mu = threading.Lock()

        def slow(self, d):
            with self.mu:
                self.live += 1
                self.peak = max(self.peak, self.live)
            time.sleep(d)
            with self.mu:
                self.live -= 1
            return self.peak

        def peak_seen(self):
            return self.peak

    with pytest.raises(TypeError):
        Counter(0)
    a = Counter.options(max_concurrency=3).remote(0)
    refs = [a.slow.remote(0.15) for _ in range(7)]
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    ray.get(refs)
    assert ray.get(a.peak_seen.remote()) == 3  # never more than 3 at once

    b = Counter.remote(0)  # a Ray actor's default: one call at a time
    ray.get([b.slow.remote(0.05) for _ in range(4)])
    assert ray.get(b.peak_seen.remote()) == 1
    with pytest.raises(TypeError):
        b.slow(0.1)


def test_wait_returns_ready_first_and_honours_timeout(ray):
    @ray.remote
    class Sleeper:
        def nap(self, d):
            time.sleep(d)
            return d

    s = Sleeper.options(max_concurrency=4).remote()
    slow, fast = s.nap.remote(0.6), s.nap.remote(0.05)
    t0 = time.monotonic()
    ready, rest = ray.wait([slow, fast], num_returns=1, timeout=5)
    assert ready == [fast] and rest == [slow]
    assert time.monotonic() - t0 < 0.5
    ready, rest = ray.wait([slow], num_returns=1, timeout=0.05)
    assert ready == [] and rest == [slow]
    assert ray.get(slow) == 0.6
    assert {fast: 1, slow: 2}[fast] == 1  # hashable, as the client's dict needs
    with pytest.raises(ValueError):
        ray.wait([fast], num_returns=2)


def test_get_raises_the_methods_exception_and_times_out(ray):
    @ray.remote
    class Bad:
        def boom(self):
            raise KeyError("nope")

        def nap(self):
            time.sleep(0.5)

    b = Bad.options(max_concurrency=2).remote()
    with pytest.raises(KeyError):
        ray.get(b.boom.remote())
    with pytest.raises(ray.GetTimeoutError):
        ray.get(b.nap.remote(), timeout=0.05)


def test_named_actor_get_if_exists(ray):
    @ray.remote
    class Box:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

    a = Box.options(name="box", get_if_exists=True).remote(1)
    b = Box.options(name="box", get_if_exists=True).remote(2)
    assert a is b and ray.get(b.get.remote()) == 1
    assert ray.get_actor("box") is a
    with pytest.raises(ValueError):
        Box.options(name="box").remote(3)


def test_abort_pending_settles_unfinished_refs(ray):
    @ray.remote
    class Loop:
        def forever(self, stop):
            stop.wait(5)
            return "late"

    stop = threading.Event()
    r = Loop.remote().forever.remote(stop)
    assert ray.abort_pending("cap") == 1
    ready, _ = ray.wait([r], num_returns=1, timeout=1)
    assert ready == [r]
    with pytest.raises(ray.AbortedError, match="cap"):
        ray.get(r)
    stop.set()


def test_abort_skips_queued_calls_and_the_pool_goes_on(ray):
    @ray.remote
    class One:
        def __init__(self):
            self.ran = []

        def hold(self, ev, tag):
            ev.wait(5)
            self.ran.append(tag)
            return tag

        def ran_tags(self):
            return list(self.ran)

    a = One.remote()  # one thread: the second call waits in the queue
    ev = threading.Event()
    first, queued = a.hold.remote(ev, "first"), a.hold.remote(ev, "queued")
    time.sleep(0.1)
    assert ray.abort_pending("cap") == 2
    ev.set()
    assert ray.get(a.ran_tags.remote(), timeout=5) == ["first"]  # queued one skipped
    with pytest.raises(ray.AbortedError):
        ray.get(queued)


def test_token_bucket_acquire_blocks_release_does_not(ray):
    tb = _load("verl_sft_under_test", os.path.join(STUBS, "verl_sandbox_fusion_tools.py"))
    bucket = tb.TokenBucketWorker.options(name="rate-limiter", get_if_exists=True).remote(2)
    assert bucket.pool_sizes() == {"": 1, "acquire": 1, "release": 10}
    ray.get([bucket.acquire.remote(), bucket.acquire.remote()])
    assert ray.get(bucket.get_current_count.remote()) == 2
    third = bucket.acquire.remote()
    ready, _ = ray.wait([third], timeout=0.2)
    assert ready == []  # no token left: the acquire waits
    ray.get(bucket.release.remote())  # not stuck behind the blocked acquire
    ready, _ = ray.wait([third], timeout=2)
    assert ready == [third]
    assert ray.get(bucket.get_current_count.remote()) == 2
