"""A stand-in for `verl.tools.sandbox_fusion_tools.TokenBucketWorker`.

verl (with its torch/Ray stack) cannot run here, and the reward client needs
only this one class from it: a named actor holding a counting semaphore of
`rate_limit` tokens, `acquire` (blocks until a token is free) in a
concurrency group of 1 so acquisitions are served in order, `release` in a
group of its own so it never waits behind a blocked acquire, and
`get_current_count` (tokens in use). bench/kernelgym_client/run_drkernel.py
installs it as that module, after the `ray` stand-in (ray_stub.py), so the
`@ray.remote` below is the stub's.
"""
from __future__ import annotations

import threading

import ray


@ray.remote(concurrency_groups={"acquire": 1, "release": 10})
class TokenBucketWorker:
    def __init__(self, rate_limit: int) -> None:
        self.rate_limit = rate_limit
        self.current_count = 0  # observability only
        self._semaphore = threading.Semaphore(rate_limit)
        self._mu = threading.Lock()

    @ray.method(concurrency_group="acquire")
    def acquire(self) -> None:
        self._semaphore.acquire()
        with self._mu:
            self.current_count += 1

    @ray.method(concurrency_group="release")
    def release(self) -> None:
        self._semaphore.release()
        with self._mu:
            self.current_count -= 1

    def get_current_count(self) -> int:
        return self.current_count
