"""The untrusted role: imports the generated kernel and answers the judge.

run_candidate(chan_fd) serves commands until "exit" or until the judge goes
away. It never sees the secret input seed or any expected output: it gets
inputs, returns outputs, and times/profiles itself on inputs drawn from a
public timing seed. Everything it says is checked or cross-checked by the
judge.

Commands (JSON header + tensors, see channel.py):
  load    {reference_code, kernel_code, backend, entry_point, init_seed, device,
           compile_ahead_s}     -> {hooks, ms (+ ahead: ms, outcome, kernels)}
  run     {mode: train|eval, grad: bool, guard: bool, ablate: bool, ablate_only, args}
                                -> {output, launches (+ guard: aliases, inputs, quiet)
                                    (+ ablation: calls, poisoned, unresolved)}
                                   or {output_problem, output_lazy, launches}
  time    {n_warmup, n_iter, seed, start, timed_start, warmup_ms, spots}
                                -> {timing (+ inputs: fingerprint, l2), launches}
  spots   {seed, sample}        -> {spots: [{index, output, meta} | {index, problem}]}
                                   (output: `sample` elements of each output tensor at
                                   positions drawn from seed; meta: their shapes, dtypes)
  wall    {draw: k, seed}       -> {}            (a wall block's inputs, drawn: CPU)
  wall    {k, seed, print_seed} -> {prints}      (a wall block; wallclock.py)
  profile {n_iter, seed}                                -> {profile}
  exit
Every reply has ok (bool), failure (when not ok), tamper (names of
measuring functions that were replaced since load) and threads (Python
threads started by forward calls that outlived them, quiet.ThreadLedger).

With guard (run_hack_checks), a checked call runs on poisoned allocator
memory, its output is copied right after the return (that copy is what the
judge gets), and the reply says which outputs share storage with an input,
the digest of every input after the call, and whether work went on after
the return (quiet.CallWatch); see docs/harness-notes.md, "Reward integrity".
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any, Callable

import torch

# cupti is imported now so that integrity's snapshot watches it from the start
from . import (ahead, compare, cpustat, cupti, guards, hooks, integrity, loader,  # noqa: F401
               prewarm, profiling, profproc, quiet, timing, wallclock)
from . import memstat
from .channel import Channel, PeerClosed, ProtocolError, pack, unpack


class CandidateState:
    """What one candidate process holds between commands."""

    def __init__(self) -> None:
        self.device = "cpu"
        self.ref_module: Any = None
        self.model: Any = None
        self.mode = ""  # the mode _forward last set on model
        self.kernel_path: str | None = None
        self.kernel_code = ""
        self.snapshot: integrity.Snapshot | None = None
        self.workdir: str | None = None
        self.setup_failure: dict | None = None
        self.out_sizes: list[int] = []  # bytes of the last outputs (what to poison)
        self.snaps: list[torch.Tensor] = []  # output copies of checked calls, reused
        self.spots: timing.SpotSampler | None = None  # timed outputs kept for the judge
        self.wall_inputs: list | None = None  # a wall block's inputs, drawn (cmd_wall)
        self.load_header: dict | None = None  # what loaded the kernel (the profiler process's copy)


def make_workdir(prefix: str) -> str:
    """A fresh directory under $TMPDIR; never a silent fallback elsewhere
    (tempfile would quietly use /tmp, and nobody would remove it). Raises
    OSError when $TMPDIR is set but unusable."""
    tmp = os.environ.get("TMPDIR")
    return tempfile.mkdtemp(prefix=prefix, dir=tmp or None)


def _infra(phase: str, exc: BaseException, what: str) -> dict:
    return {"verdict": "infra_error", "code": "INFRA_ERROR", "phase": phase,
            "type": type(exc).__name__, "message": f"{what}: {loader.safe_str(exc)}"[:2000],
            "traceback": "", "frames": []}


def _failure(exc: BaseException, phase: str, state: CandidateState) -> dict:
    return {"ok": False, "failure": loader.classify(exc, phase, state.kernel_path)}


def _setup_backend(backend: str, device: str, kernel_code: str) -> list[str]:
    """Install the launch hooks before any candidate code is imported."""
    if backend == "triton" and torch.device(device).type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # Triton's interpreter on CPU tensors
        if "triton.language" in sys.modules:  # imported before (the zygote): fix it up
            hooks.interpret_language_functions()
    if torch.device(device).type == "cuda":
        os.environ.pop("TRITON_INTERPRET", None)  # real kernels on a real device
        torch.cuda.set_device(torch.device(device))
    installed = hooks.install_extension_hooks()
    if backend == "triton" or "triton" in kernel_code:
        installed += hooks.install_triton_hooks()
    return installed


def cmd_load(state: CandidateState, h: dict, _t: list) -> tuple[dict, list]:
    state.device = str(h.get("device") or "cpu")
    state.kernel_code = str(h.get("kernel_code") or "")
    if state.setup_failure is not None:
        return {"ok": False, "failure": state.setup_failure}, []
    ms: dict[str, float] = {}
    t = timing._perf_ns()

    def lap(what: str) -> None:
        nonlocal t
        now = timing._perf_ns()
        ms[what] = (now - t) / 1e6
        t = now
    installed = _setup_backend(str(h.get("backend")), state.device, state.kernel_code)
    lap("backend")
    ref_path = loader.write_source(state.workdir, loader.REFERENCE_FILE,
                                   str(h.get("reference_code") or ""))
    state.kernel_path = os.path.abspath(loader.write_source(
        state.workdir, loader.KERNEL_FILE, state.kernel_code))
    state.load_header = {k: h.get(k) for k in ("reference_code", "kernel_code", "backend",
                                               "entry_point", "init_seed", "device")}
    if profproc.CHILD is not None:  # it loads the same files meanwhile (no calls yet)
        profproc.CHILD.start_load(state.load_header, state.workdir)
    try:
        state.ref_module = loader.import_file(ref_path, "kgym_reference")
    except BaseException as e:  # the judge imported it fine: not the candidate's fault
        info = loader.classify(e, "load", None)
        info.update(verdict="infra_error", code="REFERENCE_ERROR")
        return {"ok": False, "failure": info}, []
    # Threads started by forward calls are recorded from now on; an inductor
    # compile pool would be child processes the quiescence checks must count.
    quiet.LEDGER.install(_call_code())
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    # The persisting-L2 limit as it is before the candidate's code runs.
    timing.l2_guard_for(state.device)
    # Everything measured with, and the reference's input functions, as they
    # are before the candidate's code runs.
    state.snapshot = integrity.Snapshot()
    lap("reference")
    try:
        module = loader.import_file(state.kernel_path, "kgym_kernel")
        lap("import")
    except BaseException as e:
        return _failure(e, "load", state), []
    cls_name = f"{h.get('entry_point') or 'Model'}New"
    cls = getattr(module, cls_name, None)
    if cls is None:
        info = {"verdict": "compile_error", "code": "MISSING_MODEL_NEW", "phase": "load",
                "type": "AttributeError", "traceback": "", "frames": [],
                "message": f"kernel_code defines no class {cls_name}"}
        return {"ok": False, "failure": info}, []
    init_seed = int(h.get("init_seed") or 0)
    try:
        init = loader.init_inputs(state.ref_module, init_seed)
        state.model = loader.build_model(cls, init, init_seed, state.device)
        timing.sync(state.device)
        lap("build")
    except BaseException as e:
        return _failure(e, "init", state), []
    reply: dict = {"ok": True, "hooks": installed, "ms": ms}
    budget = h.get("compile_ahead_s")
    if (isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget > 0
            and state.device.startswith("cuda") and hooks.triton_jit_hooked()):
        # the kernels' compile, before the first call holds the device lock
        reply["ahead"] = ahead.compile_ahead(cls, init, state.ref_module, float(budget))
        lap("ahead")
    _start_pools()
    hooks.RECORDER.take()
    lap("pools")
    # the profiler process's start (CUDA, CUPTI) and its load are over
    # before the judge watches this process's descendants for work after a reply
    if profproc.CHILD is not None:
        profproc.CHILD.wait_loaded(sum(ms.values()) / 1e3)
        lap("profiler_proc_wait")
    return reply, []


def _start_pools() -> None:
    """Start torch's intra-op thread pool now (one parallel op), so threads
    that appear during a checked call are the candidate's own."""
    torch.ones(1 << 18).mul_(1.0)


def _call_code() -> Any:
    """The code object of the forward wrapper _forward returns (the frame
    quiet.ThreadLedger looks for on a thread creator's stack)."""
    for c in _forward.__code__.co_consts:
        if getattr(c, "co_name", None) == "call":
            return c
    raise RuntimeError("candidate._forward has no nested call()")


def _forward(state: CandidateState, mode: str, grad: bool) -> Callable[[Any], Any]:
    """The forward call of one command. The mode is set when it changes,
    not per call nor per command: the judge sets the reference's once per
    phase, and a wall block timed by the judge's clock must not pay a walk
    over every module that the reference's block does not (0.1-0.3 ms on a
    host-bound model of a hundred modules)."""
    model = state.model
    if state.mode != mode:
        loader.set_mode(model, mode)
        state.mode = mode

    def call(args: Any) -> Any:
        with torch.set_grad_enabled(grad):
            return model(*args)
    return call


def _pack_output(out: Any, device: str, copy: bool,
                 snaps: list | None = None) -> tuple[Any, list, list, str | None, bool]:
    """Output -> (structure, tensors to send, copies kept on the device,
    problem, lazy). Only plain tensors on the device may cross (guards.
    output_problem); lazy says the problem is a placeholder (lazy_output).
    With copy, what is sent is a copy taken now, and the copies let the
    caller see later changes; they go into the last call's buffers when
    shapes match (snaps, updated in place: a fresh large host allocation
    costs its page faults again on every call)."""
    for leaf in _leaves(out):
        found = guards.output_problem(leaf, device)
        if found is not None:
            return None, [], [], found[1], found[0] == "lazy"
    tensors: list[torch.Tensor] = []
    try:
        desc = pack(out, tensors)
    except TypeError:
        return (None, [], [], f"forward returned {type(out).__name__}, not a tensor or tuple "
                "of tensors", False)
    # device tensors go as they are: the channel copies large ones straight
    # from the device into its registered shared region
    if not copy:
        return desc, [t.detach() for t in tensors], [], None, False
    snaps = snaps if snaps is not None else []
    for i, t in enumerate(tensors):
        if not (i < len(snaps) and snaps[i].shape == t.shape and snaps[i].dtype == t.dtype
                and snaps[i].device == t.device):
            buf = torch.empty(t.shape, dtype=t.dtype, device=t.device)
            snaps[i:i + 1] = [buf]
        guards.copy_into(snaps[i], t)
    del snaps[len(tensors):]
    kept = list(snaps)
    return desc, list(kept), kept, None, False


def _scrub(snaps: list) -> None:
    """Zero the reused output copies once they are sent: between commands
    the process holds nothing of a checked call's output."""
    for t in snaps:
        if t.device.type == "cpu" and t.dtype != torch.bool:
            t.reshape(-1).view(torch.uint8).numpy().fill(0)
        else:
            t.zero_()


def _leaves(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def cmd_run(state: CandidateState, h: dict, tensors: list) -> tuple[dict, list]:
    t_in = timing._perf_ns()
    mode = "eval" if h.get("mode") == "eval" else "train"
    grad = bool(h.get("grad", False))
    guard = h.get("guard") is True
    args = loader.to_device(unpack(h.get("args", []), tensors), state.device)
    if not isinstance(args, list):
        raise ProtocolError("args must be a list")
    if h.get("ablate") is True:
        only = h.get("ablate_only")
        if only is not None and not (isinstance(only, list)
                                     and all(isinstance(n, str) for n in only)):
            raise ProtocolError("ablate_only must be a list of names")
        return _run_ablated(state, mode, grad, args, None if only is None else set(only))
    watch = None
    sizes = [a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)]
    poison = guards.Poisoned(state.device, sizes + state.out_sizes) if guard else None
    hooks.RECORDER.take()
    t_pre = timing._perf_ns()
    try:
        if poison is not None:
            watch = quiet.CallWatch()
            with poison:
                out = _forward(state, mode, grad)(args)
                timing.sync(state.device)
        else:
            out = _forward(state, mode, grad)(args)
            timing.sync(state.device)
        t_fwd = timing._perf_ns()
        desc, outs, kept, problem, lazy = _pack_output(out, state.device, guard, state.snaps)
    except BaseException as e:
        return _failure(e, "run", state), []
    launches = hooks.RECORDER.take()
    if problem:
        return {"ok": True, "output_problem": problem, "output_lazy": lazy,
                "launches": launches}, []
    state.out_sizes = [t.numel() * t.element_size() for t in outs][:16]
    reply = {"ok": True, "output": desc, "launches": launches}
    t_pack = timing._perf_ns()
    if watch is not None:
        try:
            reply["guard"] = _guard_report(state, out, kept, args, watch)
        except BaseException as e:
            return _failure(e, "run", state), []
    # where the call's time went (diagnostic only: the judge trusts none of it)
    reply["ms"] = {"prepare": (t_pre - t_in) / 1e6, "forward": (t_fwd - t_pre) / 1e6,
                   "output": (t_pack - t_fwd) / 1e6,
                   "guard": (timing._perf_ns() - t_pack) / 1e6}
    return reply, outs


def _guard_report(state: CandidateState, out: Any, kept: list, args: list,
                  watch: quiet.CallWatch) -> dict:
    """What a checked call did beyond its output: outputs sharing storage
    with an input (indices over the output's leaves), the inputs' digests
    after the call, and quiet.CallWatch's look at the time after it."""
    leaves = _leaves(out)
    aliases = guards.storage_aliases(leaves, args)
    live = [(i, leaf) for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def changed() -> list[int]:
        timing.sync(state.device)
        return [i for (i, leaf), copy in zip(live, kept) if not guards.same_values(copy, leaf)]

    report = watch.settle(changed)
    return {"aliases": aliases[:64], "inputs": guards.digests(args), "quiet": report}


def _run_ablated(state: CandidateState, mode: str, grad: bool, args: list,
                 only: set[str] | None = None) -> tuple[dict, list]:
    """The ablation forward (no_custom_kernel): every custom kernel's
    results (with only, those of the calls of these launch names) are
    replaced by large finite random values right after it returns
    (guards.Ablation), on poisoned allocator memory. What is sent is a
    copy taken before the replaced storages are put back."""
    ablation = guards.Ablation(state.device, list(args) + guards.model_tensors(state.model),
                               only)
    hooks.RECORDER.take()
    try:
        with guards.Poisoned(state.device, [a.numel() * a.element_size() for a in args
                                            if isinstance(a, torch.Tensor)]):
            hooks.RECORDER.ablation = ablation
            try:
                with ablation:
                    out = _forward(state, mode, grad)(args)
            finally:
                hooks.RECORDER.ablation = None
            timing.sync(state.device)
        desc, outs, _kept, problem, lazy = _pack_output(out, state.device, True, None)
        ablation.restore()
        timing.sync(state.device)
    except BaseException as e:
        try:
            ablation.restore()
        except BaseException:
            pass  # the forward's failure is what the judge hears about
        return _failure(e, "run", state), []
    launches = hooks.RECORDER.take()
    if problem:
        return {"ok": True, "output_problem": problem, "output_lazy": lazy,
                "launches": launches}, []
    return {"ok": True, "output": desc, "launches": launches,
            "ablation": ablation.report()}, outs


def _make_args(state: CandidateState, seed: int) -> Callable[[int], Any]:
    def make(i: int) -> Any:
        return loader.draw_inputs(state.ref_module, loader.derive_seed(seed, f"iter:{i}"),
                                  state.device)
    return make


def _count(h: dict, key: str, most: int) -> int:
    """A command's count field, within [0, most] (0 when absent)."""
    return min(max(int(h.get(key, 0) or 0), 0), most)


def cmd_time(state: CandidateState, h: dict, _t: list) -> tuple[dict, list]:
    n_warmup, n_iter = int(h.get("n_warmup", 0)), int(h.get("n_iter", 1))
    start = max(0, int(h.get("start", 0)))
    timed_start = max(0, int(h.get("timed_start", start + n_warmup)))
    warmup_ms = min(max(float(h.get("warmup_ms", 0.0)), 0.0), 1000.0)
    call = _forward(state, "train", False)
    make_args = _make_args(state, int(h.get("seed", 0)))
    k = _count(h, "spots", 16)
    if k and (state.spots is None or state.spots.k != k or start == 0):
        state.spots = timing.SpotSampler(k)  # a timing phase starts at index 0
    hooks.RECORDER.take()
    hooks.RECORDER.light = True
    try:
        # a warm-up only may leave the coming timed loop's memory cached
        res = timing.time_forward(call, make_args, n_warmup, n_iter, state.device,
                                  start=start, warmup_ms=warmup_ms, timed_start=timed_start,
                                  spots=state.spots if k else None,
                                  reserve_for=_count(h, "reserve", 1 << 20),
                                  reserve_spots=_count(h, "reserve_spots", 16))
        # the inputs it timed on, for the judge to check (none: a warm-up only)
        res["inputs"] = loader.fingerprint(make_args(timed_start)) if n_iter > 0 else None
    except BaseException as e:
        return _failure(e, "time", state), []
    finally:
        hooks.RECORDER.light = False
    return {"ok": True, "timing": res, "launches": hooks.RECORDER.take()}, []


def cmd_wall(state: CandidateState, h: dict, _t: list) -> tuple[dict, list]:
    """A wall block (wallclock.run_block); the judge times each command
    with its own clock. {"draw": k, "seed"} only draws a block's inputs
    (the CPU's blocks); {"k", "seed", "print_seed"} runs k calls, on the
    inputs drawn before when there are k of them, else each drawn right
    before its call. Only the prints cross (checked against the
    reference's), never a time. k 0 is the empty call that calibrates the
    round trip."""
    if "draw" in h:
        state.wall_inputs = None
        try:
            state.wall_inputs = wallclock.draw_block(
                _make_args(state, int(h.get("seed", 0))), _count(h, "draw", wallclock.MAX_CALLS),
                state.device)
        except BaseException as e:
            return _failure(e, "wall", state), []
        return {"ok": True}, []
    t0 = wallclock._perf_ns()
    k = _count(h, "k", wallclock.MAX_CALLS)
    inputs, state.wall_inputs = state.wall_inputs, None
    if k == 0:
        return {"ok": True, "prints": []}, []
    call = _forward(state, "train", False)
    hooks.RECORDER.take()
    hooks.RECORDER.light = True  # as in the timed loop
    try:
        res = wallclock.run_block(call, _make_args(state, int(h.get("seed", 0))), k,
                                  state.device, int(h.get("print_seed", 0)),
                                  inputs if inputs is not None and len(inputs) == k else None)
    except BaseException as e:
        return _failure(e, "wall", state), []
    finally:
        inputs = None
        hooks.RECORDER.light = False
        hooks.RECORDER.take()
    # where the block's time went by this process's clock: a claim the
    # judge keeps as a diagnostic (checks.trusted_clock.claimed_block_ms)
    return {"ok": True, "prints": res["prints"],
            "block_ms": {"calls": round(res["ms"], 4),
                         "handler": round((wallclock._perf_ns() - t0) / 1e6, 4)}}, []


def cmd_spots(state: CandidateState, h: dict, _t: list) -> tuple[dict, list]:
    """The timed outputs the spot checks kept since the last spots command
    (then forgotten): [{index, output}], or {index, problem} for an output
    that cannot cross (a placeholder, a subclass)."""
    kept = state.spots.take() if state.spots is not None else []
    state.spots = None
    seed = int(h.get("seed") or 0)
    k = min(max(int(h.get("sample") or compare.SPOT_SAMPLE), 1), 1 << 22)
    items: list[dict] = []
    tensors: list[torch.Tensor] = []
    for index, out in kept:
        problem = None
        for leaf in _leaves(out):
            found = guards.output_problem(leaf, state.device)
            if found is not None:
                problem = found[1]
                break
        if problem is None:
            try:  # the elements the judge drew (seed), not whole outputs
                samples, meta = compare.sample_output(out, seed, k)
                items.append({"index": index, "output": pack(samples, tensors), "meta": meta})
                continue
            except TypeError:
                problem = f"forward returned {type(out).__name__}"
        items.append({"index": index, "problem": problem})
    return {"ok": True, "spots": items}, tensors


def cmd_profile(state: CandidateState, h: dict, _t: list) -> tuple[dict, list]:
    """In the profiler process when there is one (profproc.py: CUPTI never
    attaches here), else here."""
    n_iter, seed = max(1, int(h.get("n_iter", 3))), int(h.get("seed", 0))
    t0 = timing._perf_ns()
    reply, why = profproc.profile_in_child(state.load_header, state.workdir, state.device,
                                           n_iter, seed)
    in_child = reply is not None
    if reply is None:
        if why:
            print(f"kgym candidate: profiling here, not in the profiler process: {why}",
                  file=sys.stderr, flush=True)
        reply = profile_here(state, n_iter, seed)
    if reply.get("ok") and isinstance(reply.get("profile"), dict):
        detail = reply["profile"].setdefault("detail_ms", {})
        if isinstance(detail, dict):
            detail["child"] = 1.0 if in_child else 0.0  # diagnostics: the judge trusts neither
            detail["delegated"] = (timing._perf_ns() - t0) / 1e6
            if in_child and profproc.CHILD is not None and profproc.CHILD.load_ms is not None:
                detail["child_load"] = profproc.CHILD.load_ms  # in the load phase
    return reply, []


def profile_here(state: CandidateState, n_iter: int, seed: int) -> dict:
    """Profiles n_iter calls in this process: {ok, profile} or a failure."""
    call = _forward(state, "train", False)
    try:
        prof = profiling.profile_forward(call, _make_args(state, seed), n_iter, state.device,
                                         state.kernel_code)
    except BaseException as e:
        return _failure(e, "profile", state)
    hooks.RECORDER.take()
    return {"ok": True, "profile": prof}


_EARLY_MS: list[float] = []  # what _early_cuda_init took (a spare's prep reports it)


def _early_cuda_init() -> str | None:
    """Initialise CUDA before the first command arrives, so it overlaps the
    judge's own start-up. The worker names the device in KGYM_DEVICE; any
    failure here is left for load to report. The device, or None."""
    want = os.environ.get("KGYM_DEVICE", "")
    if not want.startswith("cuda"):
        return None
    t0 = timing._perf_ns()
    try:
        if torch.cuda.is_available():
            torch.cuda.init()
            dev = want if ":" in want else "cuda:0"
            torch.cuda.set_device(torch.device(dev))
            return dev
    except Exception:
        pass
    finally:
        _EARLY_MS[:] = [round((timing._perf_ns() - t0) / 1e6, 1)]
    return None


def cmd_warm(state: CandidateState, h: dict, _t: list) -> tuple[dict, list]:
    """A warm spare's start-up, driven by its judge before any task exists
    (the CUDA context was made at start, _early_cuda_init): part "prep", no
    device work (imports, the tiny Triton kernel's compile, the preload's
    set-up: cuBLAS handle, stream, allocations); part "preload" (the judge
    holds the device lock shared): prewarm.preload of the families named;
    part "device" (lock held too): cuBLAS and a Triton launch. Refused once
    a kernel is loaded."""
    if state.model is not None or state.kernel_path is not None:
        return {"ok": False, "failure": {"verdict": "infra_error", "code": "PROTOCOL_ERROR",
                                         "message": "warm after load"}}, []
    want = os.environ.get("KGYM_DEVICE", "")
    t0 = timing._perf_ns()
    took: dict = {}
    try:
        failed: dict = {}
        if h.get("part") == "prep":  # any device: the cpu backend's extensions too
            # where the part's time went (its own steps; the CUDA context
            # was made at start, before this command could be read)
            if _EARLY_MS:
                took["cuda_init"] = _EARLY_MS[0]
            failed = prewarm.warm_prep(want if want.startswith("cuda") else "cpu")
            took["prep"] = round((timing._perf_ns() - t0) / 1e6, 1)
            if want.startswith("cuda") and torch.cuda.is_available():
                t1 = timing._perf_ns()
                failed.update(prewarm.preload_setup(want if ":" in want else "cuda:0"))
                took["setup"] = round((timing._perf_ns() - t1) / 1e6, 1)
        elif want.startswith("cuda") and torch.cuda.is_available():
            dev = torch.device(want if ":" in want else "cuda:0")
            if h.get("part") == "device":
                failed = prewarm.warm_device(str(dev), took)
            elif h.get("part") == "preload":  # the judge holds the device lock shared
                names = h.get("families")
                names = [n for n in names if prewarm.spare_unit(n)][:32] \
                    if isinstance(names, list) else []
                failed = prewarm.preload(str(dev), names, took)
        if failed:
            return {"ok": True, "warm_error": str(failed)[:300], "parts_ms": took,
                    "sched": cpustat.sample()}, []
    except Exception as e:  # a broken device shows up again at load
        return {"ok": True, "warm_error": loader.safe_str(e)[:300]}, []
    return {"ok": True, "ms": (timing._perf_ns() - t0) / 1e6, "parts_ms": took,
            "sched": cpustat.sample()}, []


HANDLERS = {"load": cmd_load, "run": cmd_run, "time": cmd_time, "profile": cmd_profile,
            "spots": cmd_spots, "warm": cmd_warm, "wall": cmd_wall}


def run_candidate(chan_fd: int) -> None:
    """Serve the judge on chan_fd until it says exit or closes the channel.

    Assumes nothing about argv or cwd; writes sources under a fresh
    directory in $TMPDIR (the caller points it somewhere private), removed
    at the end; an unusable $TMPDIR fails the load as infra_error.
    """
    chan = Channel(chan_fd)
    state = CandidateState()
    try:
        state.workdir = make_workdir("kgym-cand-")
    except OSError as e:  # before any candidate code: the judge may trust this
        state.setup_failure = _infra("setup", e, "the candidate's temp dir ($TMPDIR) is unusable")
    # forked before this process makes CUDA (a child cannot use a forked context)
    profproc.start(close_fds=(chan_fd,))
    early = _early_cuda_init()
    # the judge's device regions are opened from its first message on; ours
    # is made only in a command that runs with the device lock held (a warm
    # spare's "device" part) or at load (channel.py)
    chan.use_device(early, offer=False)
    try:
        while True:
            try:
                header, tensors = chan.recv()
            except PeerClosed:
                return
            except Exception as e:  # noqa: BLE001 - only a device full is answered
                if not memstat.device_full(e):
                    raise
                # the judge's tensors found no room on the device (it is
                # shared): a failure of this call, not a dead process
                chan.send(_failure(e, "run", state))
                continue
            cmd = header.get("cmd")
            if cmd == "exit":
                chan.send({"ok": True})
                return
            handler = HANDLERS.get(cmd)
            if handler is None:
                chan.send({"ok": False, "failure": {"verdict": "infra_error",
                                                    "code": "PROTOCOL_ERROR",
                                                    "message": f"unknown command {cmd!r}"}})
                continue
            reply, out = handler(state, header, tensors)
            if cmd == "load":  # large inputs arrive straight on the task's device
                chan.use_device(state.device if state.device != "cpu" else None)
            elif cmd == "warm" and header.get("part") == "device" and early:
                chan.use_device(early)  # the judge holds the device lock
            del header, tensors
            reply["tamper"] = state.snapshot.changed() if state.snapshot else []
            reply["threads"] = quiet.LEDGER.report()
            reply["chan_ms"] = {k: round(v, 2) for k, v in chan.ms.items()}  # diagnostics
            reply["mem"] = memstat.peak()  # a claim: the judge reports it as one
            chan.send(reply, out)
            del reply, out  # hold nothing of this call while serving the next
            _scrub(state.snaps)
            if cmd == "spots":  # the timed outputs are gone: their memory too
                memstat.give_back(state.device)
    finally:
        chan.close()
        if state.workdir:
            shutil.rmtree(state.workdir, ignore_errors=True)
