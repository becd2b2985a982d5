"""A miniature Dr. Kernel, end to end (docs/training.md, "The pipeline"):

  tiny model (scripts/tiny-model)
  -> cold start: `kgym collect` from the teacher (teacher.py), `kgym train --sft`
  -> serve the model (python -m kgym.serve_lm: n, logprobs, token ids, reload)
  -> round 0: `kgym rollout` against `kgym serve` on this machine
  -> per estimator (trloo, grpo), per round: `kgym train` on the last
     round's rows (MRS on the returned logprobs, PRS and the PR term in the
     rows), reload the server, `kgym rollout` again
  -> `kgym report` of every round side by side, and rounds.json/rounds.txt
     (per round and turn: Fast@1, hacking ratio, reward, share of
     zero-gradient groups, evaluation and generation time, MRS counts).

Round 1 of both estimators trains on round 0's rows: TRLOO and GRPO start
from the same data. Every number in the outputs is read from the files
the commands wrote; nothing is set by hand.

    python3 bench/pipeline/pipeline.py --mode toy|gpu --out DIR [options]

`--mode toy` (CI, a CPU): one cpu problem, a model under a million
parameters, 4 samples x 2 turns, one round. `--mode gpu` (one H200): the
gpu problems of --levels, a 30M model, 16 samples x 3 turns, --rounds
rounds while --budget-s lasts. KGYM_BIN (default build/kgym) names kgym;
the teacher command is TEACHER_CMD (default: this folder's teacher.py),
run as `TEACHER_CMD DIR`, which must print "listening on URL".
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

MODES = {
    # size, problems, backend, teacher samples/turns, sft steps/batch/lr,
    # rollout samples/turns/max tokens, rl steps/batch/lr, rounds
    "toy": dict(size="toy", problems="problems/cpu", levels="level1", only="1_GELU",
                backend="cpu", t_samples=4, t_turns=2, sft_steps=4, sft_batch=2,
                sft_lr=1e-3, samples=4, turns=2, max_tokens=48, rl_steps=2, rl_batch=4,
                rl_lr=1e-4, rounds=1, max_batch=64, batch_wait=0.05, max_len=8192,
                stage_s=240, sft_max_len=8192, fields=[],
                budget_s=0, deadline_s=0),
    # gpu: two problems, so a rollout of 16 x 3 is at most 96 evaluations on
    # the one GPU worker (about a second each): round 0 and one round of
    # each estimator fit in about 7 minutes
    "gpu": dict(size="small", problems="problems/gpu", levels="level1",
                only="1_GELU,2_RowSoftmax",
                backend="triton", t_samples=4, t_turns=3, sft_steps=200, sft_batch=4,
                sft_lr=1e-3, samples=16, turns=3, max_tokens=768, rl_steps=8, rl_batch=16,
                rl_lr=5e-5, rounds=3, max_batch=256, batch_wait=0.5, max_len=8192,
                stage_s=300, sft_max_len=4096,
                fields=["--num-correct-trials", "2", "--num-perf-trials", "20",
                        "--eval-timeout", "240"], budget_s=330, deadline_s=480),
}
ROLLOUT_DONE = re.compile(
    r"(\d+)/(\d+) trajectories in .*?; (\d+) evaluations, pass (\d+), hacked (\d+), "
    r"no code (\d+), policy failures (\d+) \(([\d.]+) s; in policy calls ([\d.]+) s, "
    r"in server calls ([\d.]+) s\)")


def log(msg: str) -> None:
    print(f"pipeline: {msg}", file=sys.stderr, flush=True)


class Fail(Exception):
    pass


class Procs:
    """Background servers, each in its own session, ended by pid."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], logf: str, env: dict | None = None,
              pattern: str = r"listening on (http://\S+)", timeout: float = 180) -> str:
        out = open(logf + ".out", "w+")
        p = subprocess.Popen(argv, stdout=out, stderr=open(logf, "w"), stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True, cwd=ROOT)
        self.procs.append(p)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with open(logf + ".out") as f:
                m = re.search(pattern, f.read())
            if m:
                log(f"{name} up at {m.group(1)} ({time.monotonic() - t0:.1f} s)")
                return m.group(1).rstrip("/,")
            if p.poll() is not None:
                break
            time.sleep(0.2)
        raise Fail(f"{name} did not start (exit {p.poll()}); its log {logf}:\n"
                   + open(logf).read()[-3000:])

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def run(argv: list[str], logf: str, timeout: float, env: dict | None = None) -> str:
    """Runs a stage; its stderr goes to logf; a nonzero exit is a failure
    of the pipeline naming the stage."""
    t0 = time.monotonic()
    with open(logf, "w") as err:
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                               timeout=timeout, env=env, cwd=ROOT)
        except subprocess.TimeoutExpired:
            raise Fail(f"{shlex.join(argv[:3])} ... did not finish in {timeout:.0f} s; "
                       f"{logf}:\n{open(logf).read()[-3000:]}")
    if p.returncode:
        raise Fail(f"{shlex.join(argv[:3])} ... exited {p.returncode} after "
                   f"{time.monotonic() - t0:.1f} s; {logf}:\n{open(logf).read()[-3000:]}")
    return p.stdout


def http_json(url: str, body: dict | None = None, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None
                                 else None, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def problem_set(m: dict, out: str) -> str:
    """A KernelBench tree of the mode's problems (with their solutions,
    for the teacher)."""
    dst = os.path.join(out, "problems")
    for level in m["levels"].split(","):
        src = os.path.join(ROOT, m["problems"], level)
        if not os.path.isdir(src):
            raise Fail(f"{src}: no such level")
        os.makedirs(os.path.join(dst, level, "solutions"), exist_ok=True)
        for f in sorted(os.listdir(src)):
            stem = f[:-3]
            if not f.endswith(".py") or (m["only"] and stem not in m["only"].split(",")):
                continue
            shutil.copy(os.path.join(src, f), os.path.join(dst, level, f))
            sol = os.path.join(src, "solutions", f"{stem}.{m['backend']}.py")
            if os.path.exists(sol):
                shutil.copy(sol, os.path.join(dst, level, "solutions", os.path.basename(sol)))
    return dst


def rollout_summary(stderr_log: str) -> dict:
    m = None
    with open(stderr_log) as f:
        for line in f:
            m = ROLLOUT_DONE.search(line) or m
    if not m:
        raise Fail(f"{stderr_log}: no summary line from kgym rollout")
    g = m.groups()
    return {"trajectories": int(g[0]), "of": int(g[1]), "evaluations": int(g[2]),
            "pass": int(g[3]), "hacked": int(g[4]), "no_code": int(g[5]),
            "policy_failures": int(g[6]), "wall_s": float(g[7]), "policy_calls_s": float(g[8]),
            "server_calls_s": float(g[9])}


def rows_facts(path: str) -> dict:
    """What the rows themselves say about cheating and MRS inputs."""
    n = hacked = with_lp = 0
    hacked_reward_max = None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            n += 1
            res = r.get("result") or {}
            if res.get("hacked"):
                hacked += 1
                if r.get("reward") is not None:
                    hacked_reward_max = max(hacked_reward_max or 0.0, r["reward"])
            if r.get("logprobs"):
                with_lp += 1
    return {"rows": n, "hacked_rows": hacked, "hacked_reward_max": hacked_reward_max,
            "rows_with_logprobs": with_lp}


def metrics(out: str, keep: str) -> dict:
    """A training run's metrics.jsonl summed up, and copied to keep (the
    checkpoints' folder may be removed)."""
    shutil.copy(os.path.join(out, "metrics.jsonl"), keep)
    with open(keep) as f:
        ms = [json.loads(x) for x in f]
    return {"steps": len(ms), "loss_first": ms[0]["loss"], "loss_last": ms[-1]["loss"],
            "mrs_checked": sum(x.get("mrs_checked", 0) for x in ms),
            "mrs_dropped": sum(x.get("mrs_dropped", 0) for x in ms),
            "tokens": sum(x.get("tokens", 0) for x in ms),
            "seconds": round(sum(x.get("seconds", 0) for x in ms), 3),
            "val_loss": ms[-1].get("val_loss")}


def last_ckpt(out: str) -> str:
    steps = [d for d in os.listdir(out) if re.fullmatch(r"step-\d+", d)]
    if not steps:
        raise Fail(f"{out}: no checkpoint")
    return os.path.join(out, max(steps, key=lambda d: int(d[5:])))


def _f(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def table(rounds: list[dict], report: dict) -> str:
    """rounds.txt: per run and turn the report's numbers (all levels), then
    per run its costs; every figure from report.json and the stage records."""
    runs = {r["name"]: r for r in report["runs"]}
    lines = [f"{'run':<10} {'turn':>4} {'n':>4} {'fast@0':>7} {'fast@1':>7} {'fast@1b':>7} "
             f"{'hacked':>7} {'reward':>7} {'flat':>6} {'eval_s':>8} {'tokens':>8}"]
    for name in runs:
        run = runs[name]
        lv = run["levels"].get("all levels") or next(iter(run["levels"].values()))
        for t, x in sorted(lv["turns"].items(), key=lambda kv: int(kv[0])):
            lines.append(
                f"{name:<10} {t:>4} {x['n']:>4} {_f(x['fast_p']['0.0']):>7} "
                f"{_f(x['fast_p']['1.0']):>7} {_f(x['fast_p_best']['1.0']):>7} "
                f"{_f(x['hacked_ratio']):>7} {_f(x['mean_reward']):>7} {_f(x['flat_share']):>6} "
                f"{_f(x['eval_s']['total'], '.1f'):>8} {_f(x['tokens']['total'], '.0f'):>8}")
    lines += ["", f"{'run':<10} {'wall_s':>7} {'policy_s':>8} {'server_s':>8} {'gen_s':>7} "
              f"{'gen_tok':>8} {'evals':>6} {'pass':>5} {'hacked':>6} {'nocode':>6} "
              f"{'train_s':>7} {'mrs drop/chk':>12} {'loss':>9}"]
    for rd in rounds:
        ro, g, tr = rd["rollout"], rd.get("generation", {}), rd.get("train") or {}
        mrs = f"{tr['mrs_dropped']}/{tr['mrs_checked']}" if tr else "-"
        lines.append(
            f"{rd['name']:<10} {ro['wall_s']:>7.1f} {ro['policy_calls_s']:>8.1f} "
            f"{ro['server_calls_s']:>8.1f} {_f(g.get('seconds'), '.1f'):>7} "
            f"{_f(g.get('tokens'), '.0f'):>8} {ro['evaluations']:>6} {ro['pass']:>5} "
            f"{ro['hacked']:>6} {ro['no_code']:>6} {_f(tr.get('seconds_wall'), '.1f'):>7} "
            f"{mrs:>12} {_f(tr.get('loss_last'), '.4f'):>9}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pipeline.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=sorted(MODES), default="toy")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, help="RL rounds per estimator (mode default)")
    ap.add_argument("--problems", help="a KernelBench tree with solutions (mode default)")
    ap.add_argument("--backend", help="the tasks' backend (mode default)")
    ap.add_argument("--only", help="comma-separated problem stems (mode default; "
                                   "'' for all of --levels)")
    ap.add_argument("--levels", help="comma-separated levels of the problem set")
    ap.add_argument("--samples", type=int)
    ap.add_argument("--turns", type=int)
    ap.add_argument("--sft-steps", type=int)
    ap.add_argument("--rl-steps", type=int)
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--budget-s", type=float,
                    help="start no RL round that would end after this many seconds "
                         "(mode default; 0: no limit)")
    ap.add_argument("--deadline-s", type=float,
                    help="a stage still running this many seconds after the start is "
                         "stopped; an RL round stopped so is left out (mode default)")
    ap.add_argument("--estimators", default="trloo,grpo")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", help="an existing model directory instead of tiny-model's")
    ap.add_argument("--workers", default="auto", help="kgym serve --workers")
    ap.add_argument("--work", help="where the models, checkpoints and kgym serve's data go "
                                   "(kept); default a temporary folder, removed at the end")
    a = ap.parse_args(argv)

    def on_term(sig, _frame):  # the servers are ended in main's finally
        raise Fail(f"stopped by signal {sig}")
    signal.signal(signal.SIGTERM, on_term)
    m = dict(MODES[a.mode])
    for k in ("problems", "backend", "only", "rounds", "levels", "samples", "turns",
              "sft_steps", "rl_steps", "max_tokens", "budget_s", "deadline_s"):
        if getattr(a, k) is not None:
            m[k] = getattr(a, k)
    t_start = time.monotonic()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    kgym = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
    py = sys.executable
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false",
               KGYM_PYTHON=os.environ.get("KGYM_PYTHON") or py,
               PYTHONPATH=os.pathsep.join(
                   [os.path.join(ROOT, "python"), os.path.join(ROOT, "harness")]
                   + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    record: dict = {"schema": "kgym.pipeline/1", "mode": a.mode, "settings": m,
                    "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "stages": {}, "rounds": []}
    stages = record["stages"]
    procs = Procs()
    cleanup: list[str] = []

    def tmo(least: float = 0) -> float:
        """A stage's time limit: the mode's, cut at the deadline."""
        if not m["deadline_s"]:
            return m["stage_s"]
        left = m["deadline_s"] - (time.monotonic() - t_start)
        return max(least, min(m["stage_s"], left))

    def stage(name: str, t0: float, **facts) -> None:
        stages[name] = {"seconds": round(time.monotonic() - t0, 2), **facts}
        log(f"{name}: {json.dumps(stages[name])}")

    try:
        # the models and checkpoints (hundreds of MB each), kgym serve's data
        # and the candidates' work dirs: out of the output folder, in a
        # folder uid nobody can reach (the output folder's parents may not be)
        if a.work:
            work = os.path.abspath(a.work)
            os.makedirs(work, exist_ok=True)
        else:
            work = tempfile.mkdtemp(prefix="kgym-pipeline-", dir="/tmp")
            cleanup.append(work)
        os.chmod(work, 0o755)
        record["work"] = work
        # 1. the model
        t0 = time.monotonic()
        model0 = a.model or os.path.join(work, "model0")
        if not a.model:
            info = json.loads(run([os.path.join(ROOT, "scripts", "tiny-model"), model0,
                                   "--size", m["size"], "--seed", str(a.seed)],
                                  os.path.join(logs, "tiny-model.log"), tmo(), env))
        else:
            info = {"model": a.model}
        stage("tiny_model", t0, **info)

        # 2. kgym serve, the problems, the teacher
        t0 = time.monotonic()
        probs = problem_set(m, out)
        sdir = os.path.join(work, "serve")
        os.makedirs(sdir)
        os.chmod(sdir, 0o755)
        server = procs.start("kgym serve", [kgym, "serve", "--listen", "127.0.0.1:0",
                                            "--data-dir", os.path.join(sdir, "data"),
                                            "--workers", a.workers],
                             os.path.join(logs, "serve.log"), env=dict(env, TMPDIR=sdir))
        tdir = os.path.join(out, "teacher")
        run([py, os.path.join(HERE, "teacher.py"), "make", probs, m["backend"], tdir],
            os.path.join(logs, "teacher-make.log"), 60, env)
        # The teacher: a stand-in for a language model. To use another
        # (kgym policy scripted DIR, or a real model behind vLLM), set
        # TEACHER_CMD; it is run as `TEACHER_CMD DIR` and must print
        # "listening on URL".
        tcmd = shlex.split(os.environ.get("TEACHER_CMD")
                           or f"{shlex.quote(py)} {shlex.quote(os.path.join(HERE, 'teacher.py'))} serve")
        teacher = procs.start("teacher", tcmd + [tdir], os.path.join(logs, "teacher.log"), env=env)
        common = ["--server", server, "--problems", probs, "--backend", m["backend"],
                  *m["fields"]]
        stage("servers", t0)

        # 3. cold start
        t0 = time.monotonic()
        sft = os.path.join(out, "sft.jsonl")
        teacher_rows = os.path.join(out, "rounds", "teacher.jsonl")
        os.makedirs(os.path.dirname(teacher_rows), exist_ok=True)
        run([kgym, "collect", "--sft", sft, "--policy", teacher, "--model", "teacher",
             *common, "--samples", str(m["t_samples"]), "--turns", str(m["t_turns"]),
             "--seed", str(a.seed), "--w-pr", "1", "--out", teacher_rows],
            os.path.join(logs, "collect.log"), tmo(), env)
        with open(sft) as f:
            kept = sum(1 for _ in f)
        record["rounds"].append({"name": "teacher", "rows_file": os.path.relpath(teacher_rows, out),
                                 "rollout": rollout_summary(os.path.join(logs, "collect.log")),
                                 **rows_facts(teacher_rows)})
        stage("collect", t0, sft_chats=kept, **rollout_summary(os.path.join(logs, "collect.log")),
              **rows_facts(teacher_rows))
        if not kept:
            raise Fail(f"{sft}: the teacher gave no usable trajectory")
        t0 = time.monotonic()
        sft_out = os.path.join(work, "ckpt", "sft")
        run([kgym, "train", "--sft", sft, "--model", model0, "--out", sft_out,
             "--steps", str(m["sft_steps"]), "--batch-size", str(m["sft_batch"]),
             "--lr", str(m["sft_lr"]), "--max-len", str(m["sft_max_len"]), "--val-frac", "0.2",
             "--eval-every", str(max(1, m["sft_steps"] // 4)), "--seed", str(a.seed)],
            os.path.join(logs, "train-sft.log"), tmo(), env)
        stage("sft", t0, **metrics(sft_out, os.path.join(logs, "metrics-sft.jsonl")))

        # 4. serve the model, round 0
        t0 = time.monotonic()
        ckpt = last_ckpt(sft_out)
        lm = procs.start("serve_lm", [py, "-m", "kgym.serve_lm", ckpt, "--name", "tiny",
                                      "--max-batch", str(m["max_batch"]),
                                      "--batch-wait", str(m["batch_wait"])]
                         + (["--threads", "1"] if a.mode == "toy" else []),
                         os.path.join(logs, "serve_lm.log"), env=env)
        stage("serve_lm", t0)
        sampling = ["--samples", str(m["samples"]), "--turns", str(m["turns"]),
                    "--temperature", "1.0", "--top-p", "1.0", "--max-tokens", str(m["max_tokens"]),
                    "--logprobs", "--w-pr", "1", "--policy-deadline", "900"]

        def roll(name: str, ckpt: str, seed: int) -> dict:
            t0 = time.monotonic()
            if http_json(lm + "/health")["model"] != ckpt:
                http_json(lm + "/v1/reload", {"model": ckpt})
            reload_s = time.monotonic() - t0
            before = http_json(lm + "/health")["stats"]
            rows = os.path.join(out, "rounds", f"{name}.jsonl")
            logf = os.path.join(logs, f"rollout-{name}.log")
            run([kgym, "rollout", "--policy", lm, "--model", "tiny", *common, *sampling,
                 "--seed", str(seed), "--out", rows], logf, tmo(), env)
            after = http_json(lm + "/health")["stats"]
            rd = {"name": name, "checkpoint": os.path.relpath(ckpt, work), "rows_file":
                  os.path.relpath(rows, out), "reload_s": round(reload_s, 2),
                  "rollout": rollout_summary(logf), **rows_facts(rows),
                  "generation": {k: round(after[k] - before[k], 3) for k in after}}
            record["rounds"].append(rd)
            log(f"round {name}: {json.dumps(rd)}")
            return rd

        roll("r0-sft", ckpt, a.seed * 1000)
        # 5. RL rounds: each estimator from the same round-0 rows
        ests = [e for e in a.estimators.split(",") if e]
        state = {e: ("r0-sft", ckpt) for e in ests}
        t_round = None
        for k in range(1, m["rounds"] + 1):
            spent = time.monotonic() - t_start
            if m["budget_s"] and t_round and spent + t_round > m["budget_s"]:
                log(f"budget: {spent:.0f} s spent, a round takes {t_round:.0f} s; "
                    f"stopping before round {k}")
                record["stopped_before_round"] = k
                break
            tr0 = time.monotonic()
            try:
                for e in ests:
                    prev, pck = state[e]
                    rows = os.path.join(out, "rounds", f"{prev}.jsonl")
                    tout = os.path.join(work, "ckpt", f"{e}-r{k}")
                    t0 = time.monotonic()
                    run([kgym, "train", rows, "--model", pck, "--out", tout, "--estimator", e,
                         "--token-ids", "rows", "--steps", str(m["rl_steps"]),
                         "--batch-size", str(m["rl_batch"]), "--lr", str(m["rl_lr"]),
                         "--max-len", str(m["max_len"]), "--seed", str(a.seed + k)],
                        os.path.join(logs, f"train-{e}-r{k}.log"), tmo(), env)
                    tm = {"seconds_wall": round(time.monotonic() - t0, 2), **metrics(tout, os.path.join(logs, f"metrics-{e}-r{k}.jsonl"))}
                    rd = roll(f"r{k}-{e}", last_ckpt(tout), a.seed * 1000 + k)
                    rd["train"] = {"on": prev, "estimator": e, **tm}
                    state[e] = (f"r{k}-{e}", last_ckpt(tout))
            except Fail as err:  # the rounds done so far are reported
                record["rounds_error"] = str(err)
                log(f"round {k} stopped: {err}")
                break
            t_round = time.monotonic() - tr0

        # 6. the report
        t0 = time.monotonic()
        files = [os.path.join(out, r["rows_file"]) for r in record["rounds"]]
        # report.html needs matplotlib; without it report.json and the tables
        html = [] if importlib.util.find_spec("matplotlib") else ["--no-html"]
        record["report_html"] = not html
        run([kgym, "report", *files, "--out", os.path.join(out, "report"), *html],
            os.path.join(logs, "report.log"), 300, env)
        stage("report", t0)
        with open(os.path.join(out, "report", "report.json")) as f:
            report = json.load(f)
        txt = table(record["rounds"], report)
        record["total_s"] = round(time.monotonic() - t_start, 1)
        with open(os.path.join(out, "rounds.txt"), "w") as f:
            f.write(txt)
        print(txt, end="")
    except (Fail, subprocess.TimeoutExpired) as e:
        record["error"] = str(e)
        log(f"FAILED: {e}")
        return 1
    finally:
        procs.close()
        for d in cleanup:
            shutil.rmtree(d, ignore_errors=True)
        record.setdefault("total_s", round(time.monotonic() - t_start, 1))
        with open(os.path.join(out, "rounds.json"), "w") as f:
            json.dump(record, f, indent=1)
    log(f"done in {record['total_s']} s: {out}/rounds.json, rounds.txt, report/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
