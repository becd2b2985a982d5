"""A stand-in for the few parts of Ray that drkernel's reward client uses.

Ray cannot run here (no cluster, and the bench must not depend on it), so
bench/kernelgym_client/run_drkernel.py installs this module as `ray` in
sys.modules before it imports the unchanged client. It keeps Ray's
semantics where the client depends on them:

- `@ray.remote` on a class gives an actor class: `Cls.remote(*a)` or
  `Cls.options(name=..., get_if_exists=..., max_concurrency=...).remote(*a)`
  makes an actor (one instance, built at once); `handle.method.remote(*a)`
  queues the call on the actor's thread pool and returns an ObjectRef at
  once. The pool has `max_concurrency` threads (default 1, as for a Ray
  actor); a method marked `@ray.method(concurrency_group=G)` runs in G's
  own pool from `concurrency_groups={G: n}`. Calls start in the order they
  were queued.
- Named actors: `name=` registers the actor; `get_if_exists=True` returns
  the one already registered under that name (`ray.get_actor(name)` too).
- `ray.wait(refs, num_returns=1, timeout=None)` -> (ready, not_ready), both
  in the order of refs; `ray.get(ref_or_list, timeout=None)` returns the
  value or raises the method's exception.
- `@ray.remote` on a function: `fn.remote(*a)` runs it in a shared pool.

Pool threads are daemons, so a run can end while a method still loops.
`abort_pending(msg)` settles every unfinished ref with an AbortedError
(what the bench does when its wall-time cap is reached); the methods
themselves keep running, as there is no way to stop a Python thread.
Standard library only.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError
from concurrent.futures import wait as _futures_wait
from typing import Any, Callable

__all__ = ["remote", "method", "wait", "get", "get_actor", "kill", "init",
           "is_initialized", "shutdown", "ObjectRef", "ActorHandle",
           "GetTimeoutError", "AbortedError", "abort_pending"]

FUNCTION_POOL_SIZE = 64


class GetTimeoutError(TimeoutError):
    """ray.get(..., timeout=T) ran out of time."""


class AbortedError(RuntimeError):
    """The ref was settled by abort_pending() before its method returned."""


_lock = threading.RLock()
_named: dict[str, "ActorHandle"] = {}
_pending: set["ObjectRef"] = set()
_initialized = False


class ObjectRef:
    """A future-like handle on one method call's result (hashable by identity)."""

    __slots__ = ("_future", "_label", "__weakref__")

    def __init__(self, future: Future, label: str) -> None:
        self._future = future
        self._label = label

    def future(self) -> Future:
        return self._future

    def __repr__(self) -> str:
        state = "done" if self._future.done() else "pending"
        return f"ObjectRef({self._label}, {state})"


def _settle(ref: ObjectRef, value: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is not None:
            ref._future.set_exception(exc)
        else:
            ref._future.set_result(value)
    except InvalidStateError:
        pass  # already settled by abort_pending()
    with _lock:
        _pending.discard(ref)


def _start(fut: Future) -> bool:
    try:
        return fut.set_running_or_notify_cancel()
    except RuntimeError:  # settled by abort_pending() just now
        return False


class _Pool:
    """A FIFO queue served by up to `size` daemon threads (started lazily)."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {size}")
        self.size = size
        self.name = name
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._mu = threading.Lock()

    def submit(self, fn: Callable, args: tuple, kwargs: dict, label: str) -> ObjectRef:
        ref = ObjectRef(Future(), label)
        with _lock:
            _pending.add(ref)
        with self._mu:
            self._q.put((ref, fn, args, kwargs))
            if self._idle == 0 and len(self._threads) < self.size:
                t = threading.Thread(target=self._serve, daemon=True,
                                     name=f"{self.name}-{len(self._threads)}")
                self._threads.append(t)
                t.start()
            else:
                self._idle -= 1 if self._idle else 0
        return ref

    def _serve(self) -> None:
        while True:
            ref, fn, args, kwargs = self._q.get()
            # a call settled by abort_pending() while queued does not run
            if not ref._future.done() and _start(ref._future):
                try:
                    value = fn(*args, **kwargs)
                except BaseException as e:  # noqa: BLE001 - handed to ray.get
                    _settle(ref, exc=e)
                else:
                    _settle(ref, value)
            with self._mu:
                self._idle += 1

    def threads(self) -> int:
        return len(self._threads)


class _ActorMethod:
    def __init__(self, fn: Callable, pool: _Pool, label: str) -> None:
        self._fn = fn
        self._pool = pool
        self._label = label

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        return self._pool.submit(self._fn, args, kwargs, self._label)

    def options(self, **_: Any) -> "_ActorMethod":
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actor methods cannot be called directly; use "
                        f"{self._label}.remote()")


class ActorHandle:
    """One actor: the instance and its pools (default and per group)."""

    def __init__(self, cls: type, args: tuple, kwargs: dict, opts: dict) -> None:
        self._cls = cls
        name = cls.__name__
        self._pool = _Pool(int(opts.get("max_concurrency") or 1), name)
        self._groups = {g: _Pool(int(n), f"{name}.{g}")
                        for g, n in (opts.get("concurrency_groups") or {}).items()}
        self._instance = cls(*args, **kwargs)

    def __getattr__(self, attr: str) -> _ActorMethod:
        if attr.startswith("_"):
            raise AttributeError(attr)
        fn = getattr(self._instance, attr)
        if not callable(fn):
            raise AttributeError(f"{self._cls.__name__}.{attr} is not a method")
        group = getattr(getattr(self._cls, attr, None), "_ray_concurrency_group", None)
        pool = self._groups.get(group, self._pool) if group else self._pool
        return _ActorMethod(fn, pool, f"{self._cls.__name__}.{attr}")

    def pool_sizes(self) -> dict[str, int]:
        """Configured thread counts: "" for the default pool, then each group."""
        return {"": self._pool.size, **{g: p.size for g, p in self._groups.items()}}

    def __repr__(self) -> str:
        return f"ActorHandle({self._cls.__name__})"


class _ActorClass:
    def __init__(self, cls: type, opts: dict) -> None:
        self._cls = cls
        self._opts = opts
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def options(self, **opts: Any) -> "_ActorClass":
        return _ActorClass(self._cls, {**self._opts, **opts})

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        name = self._opts.get("name")
        with _lock:  # re-entrant: an actor's __init__ may create named actors
            if name and name in _named:
                if self._opts.get("get_if_exists"):
                    return _named[name]
                raise ValueError(f"an actor named {name!r} already exists")
            handle = ActorHandle(self._cls, args, kwargs, self._opts)
            if name:
                _named[name] = handle
            return handle

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Actors cannot be instantiated directly; use "
                        f"{self._cls.__name__}.remote()")


class _RemoteFunction:
    _pool: _Pool | None = None

    def __init__(self, fn: Callable, opts: dict) -> None:
        self._fn = fn
        self._opts = opts
        self.__name__ = getattr(fn, "__name__", "remote_function")

    def options(self, **opts: Any) -> "_RemoteFunction":
        return _RemoteFunction(self._fn, {**self._opts, **opts})

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        with _lock:
            if _RemoteFunction._pool is None:
                _RemoteFunction._pool = _Pool(FUNCTION_POOL_SIZE, "remote_fn")
        return _RemoteFunction._pool.submit(self._fn, args, kwargs, self.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Remote functions cannot be called directly; use "
                        f"{self.__name__}.remote()")


def _make_remote(obj: Any, opts: dict) -> Any:
    if isinstance(obj, type):
        return _ActorClass(obj, opts)
    if callable(obj):
        return _RemoteFunction(obj, opts)
    raise TypeError(f"@ray.remote needs a class or a function, got {obj!r}")


def remote(*args: Any, **opts: Any) -> Any:
    """`@ray.remote` or `@ray.remote(max_concurrency=..., concurrency_groups=...)`."""
    if len(args) == 1 and not opts and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("ray.remote takes one class or function, or keyword options")
    return lambda obj: _make_remote(obj, opts)


def method(*, concurrency_group: str | None = None, **_: Any) -> Callable:
    """`@ray.method(concurrency_group=G)`: run this method in G's pool."""
    def mark(fn: Callable) -> Callable:
        fn._ray_concurrency_group = concurrency_group
        return fn
    return mark


def _check_refs(refs: Any) -> list[ObjectRef]:
    if not isinstance(refs, (list, tuple)):
        raise TypeError(f"wait() expected a list of ObjectRef, got {type(refs).__name__}")
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"wait() expected a list of ObjectRef, got {r!r}")
    return list(refs)


def wait(refs: list, *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list, list]:
    """Up to num_returns finished refs and the rest, both in the order of refs."""
    refs = _check_refs(refs)
    if num_returns < 1 or num_returns > len(refs):
        raise ValueError(f"num_returns must be in 1..{len(refs)}, got {num_returns}")
    deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
    while True:
        ready = [r for r in refs if r._future.done()]
        if len(ready) >= num_returns:
            break
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        _futures_wait([r._future for r in refs if not r._future.done()],
                      timeout=left, return_when=FIRST_COMPLETED)
    ready = ready[:num_returns]
    taken = {id(r) for r in ready}
    return ready, [r for r in refs if id(r) not in taken]


def get(obj: Any, *, timeout: float | None = None) -> Any:
    """The value of a ref (or a list of them); raises what the method raised."""
    if isinstance(obj, (list, tuple)):
        deadline = None if timeout is None else time.monotonic() + timeout
        return [get(r, timeout=None if deadline is None
                    else max(0.0, deadline - time.monotonic())) for r in obj]
    if not isinstance(obj, ObjectRef):
        raise TypeError(f"get() expected an ObjectRef, got {obj!r}")
    try:
        return obj._future.result(timeout=timeout)
    except TimeoutError as e:
        if obj._future.done():
            raise
        raise GetTimeoutError(f"ray.get timed out after {timeout} s on {obj!r}") from e


def abort_pending(message: str) -> int:
    """Settle every unfinished ref with AbortedError(message); returns how many."""
    with _lock:
        refs = list(_pending)
    for r in refs:
        _settle(r, exc=AbortedError(message))
    return len(refs)


def pending_count() -> int:
    with _lock:
        return len(_pending)


def get_actor(name: str) -> ActorHandle:
    with _lock:
        if name not in _named:
            raise ValueError(f"no actor named {name!r}")
        return _named[name]


def kill(actor: ActorHandle, **_: Any) -> None:
    with _lock:
        for k, v in list(_named.items()):
            if v is actor:
                del _named[k]


def init(*_: Any, **__: Any) -> None:
    global _initialized
    _initialized = True


def is_initialized() -> bool:
    return _initialized


def shutdown() -> None:
    global _initialized
    with _lock:
        _named.clear()
    _initialized = False
