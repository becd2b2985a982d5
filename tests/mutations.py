"""The mutations of `make mutate` (scripts/mutate): one small deliberate bug
per defence that decides a verdict, a reward or durability. Each must turn
at least one of its tests red. A new defence gets its mutation here, with
the fast tests that are meant to catch it.

find: text that occurs exactly once in file; replace: the bug.
tests: "unit:NAME" (a cmocka binary of tests/unit) or pytest arguments
("PATH", "PATH::TEST", "PATH -k 'EXPR'", split as a shell would).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mutation:
    id: str
    defence: str
    file: str
    find: str
    replace: str
    tests: list[str] = field(default_factory=list)


CPU_VERDICTS = "tests/harness/test_cpu_verdicts.py"
COMPAT = "tests/integration/test_kernelgym_compat.py"
CONTRACT = "tests/integration/test_contract.py"
HARDENING = "tests/integration/test_server_hardening.py"
CODE_FILES = "tests/integration/test_cli_code_files.py"
TRUSTED = "tests/harness/test_trusted_clock.py"
ROLLOUT = "tests/integration/test_rollout.py"

MUTATIONS = [
    # ---- RL math (libkgym) ----------------------------------------------
    Mutation("rl-trloo-self-inclusive", "TRLOO leaves the sample out of its baseline",
             "lib/rl.c", "scale[j] = (double)cnt[j] / (cnt[j] - 1);", "scale[j] = 1.0;",
             ["unit:test_rl"]),
    Mutation("rl-reward-no-cap", "the speedup term is capped at 3", "lib/rl.c",
             "double r = 1.0 + fmin(speedup[i], cfg->cap);", "double r = 1.0 + speedup[i];",
             ["unit:test_rl"]),
    Mutation("rl-reward-hacked-scored", "a hacked turn gets the penalty", "lib/rl.c",
             "if (!correct[i] || hacked[i]) {", "if (!correct[i]) {", ["unit:test_rl"]),
    Mutation("rl-mrs-no-veto", "MRS vetoes a sequence with one token ratio < 1e-4",
             "lib/rl.c", "keep[s] = r >= cfg->lo && r <= cfg->hi && !(exp(dmin) < cfg->veto);",
             "keep[s] = r >= cfg->lo && r <= cfg->hi;", ["unit:test_rl"]),
    Mutation("rl-mrs-no-window", "MRS keeps only geometric ratios inside [lo, hi]",
             "lib/rl.c", "keep[s] = r >= cfg->lo && r <= cfg->hi && !(exp(dmin) < cfg->veto);",
             "keep[s] = !(exp(dmin) < cfg->veto);", ["unit:test_rl"]),
    Mutation("rl-prs-unclipped", "PRS keep probability clipped to [0, 1]", "lib/rl.c",
             "q = fmin(fmax((pr[i] - tau) / s, 0.0), 1.0);", "q = fmax((pr[i] - tau) / s, 0.0);",
             ["unit:test_rl"]),

    # ---- what a result's reward-bearing fields mean -----------------------
    Mutation("result-speedup-on-failure", "no speedup on a result that did not pass",
             "src/common/result.c", "        withhold_figures(r);", "(void)withhold_figures;",
             [f"{COMPAT} -k 'not real_workers'"]),
    Mutation("result-no-decoy-on-hacked", "every hacked verdict is a decoy for KernelGym",
             "src/common/result.c", 'json_object_set_new(r, "decoy_kernel", json_true());',
             "(void)0;", [f"{COMPAT} -k 'not real_workers'"]),
    Mutation("result-coverage-on-failure", "no coverage figure on a result that did not pass",
             "src/common/result.c", "    if (pass)\n        f = read_profile(",
             "    if (pass || 1)\n        f = read_profile(", [f"{COMPAT} -k 'not real_workers'"]),

    Mutation("result-new-incomplete", "a result kgym writes itself has every contract field",
             "src/common/result.c", '    json_object_set_new(r, "checks", json_object());\n', "",
             [f"{CONTRACT} -k written_results"]),
    Mutation("python-timeout-bound", "the harness bounds timeout as the contract says",
             "harness/kgym_harness/schema.py", "MAX_TIMEOUT = 3600.0", "MAX_TIMEOUT = 86400.0",
             [f"{CONTRACT} -k 'python_limits and timeout'"]),

    # ---- durability and the server ------------------------------------------
    Mutation("sqlite-no-fdatasync", "group commit fsyncs the WAL before a write returns",
             "src/server/sqldb_write.c", "int r = fdatasync(d->walfd);", "int r = 0;",
             ["unit:test_sqldb"]),
    Mutation("sched-infra-retried-forever", "an infra_error is retried at most max_attempts",
             "src/server/sched.c", "if (infra && t.attempts < sc->p.max_attempts) {",
             "if (infra) {", [f"{COMPAT} -k failed_task_says_why"]),
    Mutation("redis-stale-conn-reused", "a pooled Redis connection Redis closed is not used",
             "src/server/store_redis_conn.c", "return c->fd < 0 || poll(&p, 1, 0) != 0;",
             "(void)p;\n    return c->fd < 0;",
             ["unit:test_store", "tests/integration/test_multinode.py -k redis_kill9"]),
    Mutation("auth-any-token", "a client token must be one of the configured ones",
             "src/server/auth.c", "found |= (unsigned)(diff == 0);", "found |= 1u;",
             ["tests/integration/test_server_api.py -k test_auth"]),
    Mutation("request-trials-unbounded", "num_perf_trials is bounded (1..10000)",
             "src/common/request.c", '{"num_perf_trials", F_INT, 0, 1, 10000,',
             '{"num_perf_trials", F_INT, 0, 1, 1e12,', [f"{CONTRACT} -k num_perf_trials"]),
    Mutation("cache-key-ignores-atol", "the result cache key covers the tolerance",
             "src/common/request.c", '{"atol", F_NUM, 0, 0, 1e6, NULL, 1e-2, 0, NULL, 1},',
             '{"atol", F_NUM, 0, 0, 1e6, NULL, 1e-2, 0, NULL, 0},', ["unit:test_request"]),

    # ---- the server's edge (issue 31) --------------------------------------------
    Mutation("http-trust-any-peer", "only peers inside --trust-clients-from skip the token",
             "src/server/auth.c", "        if (kg_cidr_match(&a->trusted[i], sa))",
             "        if (kg_cidr_match(&a->trusted[i], sa) || 1)", [f"{HARDENING} -k outside_the_ranges"]),
    Mutation("http-trust-worker-endpoints", "worker endpoints always need a worker token",
             "src/server/http.c",
             "if (authz || !(c->role == KG_AUTH_CLIENT || c->role == KG_AUTH_ANY) ||",
             "if (authz || 0 ||", [f"{HARDENING} -k trusted_range_needs_no_client_token"]),
    Mutation("http-encoded-slash", "an encoded '/' or NUL never routes to another path",
             "src/server/http_route.c",
             "            if (!path_char(ch))\n                return -1; /* an encoded",
             "            if (0)\n                return -1; /* an encoded",
             [f"{HARDENING} -k encoded_slash"]),
    Mutation("http-duplicate-content-length", "two Content-Length headers are refused",
             "src/server/http_route.c", "    if (hs.n_cl > 1)\n", "    if (0)\n",
             [f"{HARDENING} -k duplicate_content_length"]),
    Mutation("cli-nul-in-code", "a code file with a NUL byte is refused, not cut",
             "src/cli/cli_util.c", "const char *why = NULL, *nul = memchr(b, 0, n);",
             "const char *why = NULL, *nul = NULL;", [f"{CODE_FILES} -k nul_byte"]),
    Mutation("cli-size-before-read", "a code file's size is checked before it is read",
             "src/cli/cli_util.c", "    if ((unsigned long long)st.st_size > limit) {",
             "    if (0) {", [f"{CODE_FILES} -k huge_sparse"]),

    # ---- a broken problem is not the candidate's (issue 31) ------------------------
    Mutation("problem-blamed-on-candidate", "the reference's own failure is problem_error",
             "harness/kgym_harness/judge.py",
             'schema.set_error(self.result, "problem_error", "PROBLEM_ERROR", e.phase, e.type,',
             'schema.set_error(self.result, "runtime_error", "FORWARD_EXCEPTION", e.phase, e.type,',
             ["tests/harness/test_problem_error.py -k broken_reference"]),
    Mutation("rl-problem-error-scored", "a problem_error turn gets no reward",
             "lib/rl_json.c", "        tu->excluded = 1;\n", "        tu->excluded = 0;\n",
             ["tests/python/test_rl_cli.py -k problem_error"]),

    # ---- the kill layers and the thread looks (issue 32's audit) ----------------------
    Mutation("engine-kill-leader-only", "the engine kills a child with its process group",
             "src/worker/engine_spawn.c", "        kg_sandbox_kill_group(c->pid, 2000, &st, NULL);",
             "        kill(c->pid, SIGKILL);",
             ["tests/faults/test_kill_layers.py -k group_kill_alone"]),
    Mutation("cgroup-close-no-kill", "closing a task's cgroup kills what is left in it (v1)",
             "src/worker/sandbox_cgroup.c", "            int c = procs_scan(g->dir[i], 1);",
             "            int c = procs_scan(g->dir[i], 0);",
             ["tests/faults/test_kill_layers.py -k cgroup_alone"]),
    Mutation("cache-dir-unlocked", "workers of one machine make the candidates' cache one "
             "at a time", "src/worker/engine_uid.c",
             "    while (flock(fd, LOCK_EX) < 0 && errno == EINTR)\n        ;\n", "",
             ["unit:test_engine_cache"]),
    Mutation("thread-ledger-ignored", "the thread ledger alone flags work left after return",
             "harness/kgym_harness/audit.py",
             '    if "ledger" in on and (remote.late_threads or remote.thread_busy_ms > 1.0):',
             "    if False and (remote.late_threads or remote.thread_busy_ms > 1.0):",
             ["tests/harness/test_integrity_threads.py -k ledger_alone"]),
    Mutation("process-watch-ignored", "the process watch alone flags work left after return",
             "harness/kgym_harness/audit.py",
             '    w = remote.watch if "watch" in on else None', "    w = None",
             ["tests/harness/test_integrity_threads.py -k watch_alone"]),
    Mutation("timing-stream-sample", "a timed call's sample includes side-stream work",
             "harness/kgym_harness/timing.py", "            samples.append(ms)",
             "            samples.append(t_s)", ["tests/harness/test_timing_side_stream.py"]),
    Mutation("timing-lead-short-ceiling", "the lead covers a host-bound call's launches",
             "harness/kgym_harness/timing.py", "LEAD_MAX_NS = 20_000_000 ",
             "LEAD_MAX_NS = 200_000 ", ["tests/harness/test_timing_lock.py -k lead"]),
    Mutation("timing-lead-late-unbounded", "a call that waits inside keeps a bounded lead",
             "harness/kgym_harness/timing.py",
             "max(self.floor_ns, min(2.0 * self.ns(), top))",
             "max(self.floor_ns, 2.0 * self.ns())", ["tests/harness/test_timing_lock.py -k lead"]),

    Mutation("warm-spare-lock-dropped", "a warm spare's task holds the device lock from "
             "its start message", "harness/kgym_harness/judge.py",
             '        task["device_lock"] = device_lock\n',
             '        pass\n',
             ["tests/integration/test_engine_knobs.py -k device_lock"]),
    Mutation("engine-cpu-threads-ignored", "--cpu-threads reaches the candidate",
             "src/worker/engine_env.c", "    if (e->cfg.cpu_threads > 0)\n",
             "    if (0)\n",
             ["tests/integration/test_engine_knobs.py -k flags-win"]),

    Mutation("results-poll-not-woken", "a final result answers the result polls waiting "
             "for it", "src/server/api_worker.c",
             "            kg_http_key_add(rep->done_keys, tid);",
             "            (void)tid;",
             ["tests/integration/test_server_results_poll.py -k parks_until_a_result"]),
    Mutation("agent-results-not-long-polled", "the agent waits for results at the server, "
             "not by polling", "src/agent/rollout_loop.c",
             "ro_env_poll(r, us, n, wait ? POLL_WAIT_S : 0)", "ro_env_poll(r, us, n, 0)",
             ["tests/integration/test_rollout.py -k long_poll"]),

    Mutation("heartbeat-running-uncounted", "a lease whose reply was lost goes back to "
             "pending (the store's heartbeat counts what the worker holds)",
             "src/server/store_sqlite_workers.c",
             "a->running = rc < 0 ? 0 : kg_sqlconn_changes(c);", "a->running = 0;",
             ["tests/integration/test_server_api.py -k which_tasks_it_no_longer_holds"]),
    Mutation("heartbeat-running-uncounted-redis", "the same on Redis",
             "src/server/store_redis_lua.c", "    \" n = n + #pl\\n\"\n", "",
             ["tests/integration/test_server_api.py -k which_tasks_it_no_longer_holds"]),

    # ---- the agent's scores (kgym rollout, issue 25) -----------------------------
    Mutation("agent-problem-error-scored", "a problem_error turn is not the policy's: not "
             "scored", "src/agent/rollout_score.c",
             '!strcmp(v, "infra_error") || !strcmp(v, "problem_error"))',
             '!strcmp(v, "infra_error"))',
             [f"{ROLLOUT} -k broken"]),
    Mutation("agent-no-code-unscored", "a reply without code scores the penalty",
             "src/agent/rollout_score.c", "u->valid = u->reply && !u->code;",
             "u->valid = 0;", [f"{ROLLOUT} -k feedback_rewards"]),
    Mutation("agent-first-block", "the code is the reply's last python block",
             "src/agent/prompt.c", "            body = open, end = p, open = NULL;",
             "            body = body ? body : open, end = end ? end : p, open = NULL;",
             ["unit:test_agent_prompt"]),

    # ---- kgym report's numbers (issue 26) --------------------------------------
    Mutation("report-hacked-counts", "a hacked kernel is never correct, whatever it claims",
             "src/agent/report_read.c", "r->correct = json_is_true(c) && !r->hacked;",
             "r->correct = json_is_true(c);", ["unit:test_report"]),
    Mutation("report-strict-tie", "--strict: a speedup of exactly p is not fast",
             "src/agent/report_stats.c", "nextafter(rp_ps[j], INFINITY) : rp_ps[j]",
             "rp_ps[j] : rp_ps[j]", ["unit:test_report"]),
    Mutation("report-flat-lone", "a group of one attempt gives no gradient either",
             "src/agent/report_stats.c", "            if (nv > 0) {",
             "            if (nv > 1) {", ["unit:test_report"]),

    # ---- the judge's checks (harness) ------------------------------------------
    Mutation("judge-no-launch-decoy", "no custom launch in any mode is no_custom_kernel",
             "harness/kgym_harness/judge.py", "        if not any(counts):\n",
             "        if False:\n", [f"{CPU_VERDICTS} -k test_decoy_kernel_is_hacked"]),
    Mutation("judge-no-mode-branch", "custom kernels in some modes only is mode_branch",
             "harness/kgym_harness/judge.py", "elif not all(counts) and not dep:",
             "elif False:", [f"{CPU_VERDICTS} -k mode_branch"]),
    Mutation("judge-no-ablation", "an output that survives the ablation is no_custom_kernel",
             "harness/kgym_harness/judge.py",
             '            info["outcome"] = "no_effect"\n            self.result["decoy_kernel"] = True\n'
             '            self.hack(',
             '            info["outcome"] = "no_effect"\n            self.result["decoy_kernel"] = True\n'
             '            (lambda *a, **k: None)(',
             ["tests/harness/test_integrity_gaps.py -k token"]),
    Mutation("judge-no-spot-check", "a wrong timed output is call_count_switch",
             "harness/kgym_harness/judge.py",
             '                if fail is not None:\n                    checks["spot_checks"]["failed"] = i',
             '                if False:\n                    checks["spot_checks"]["failed"] = i',
             ["tests/harness/test_integrity_gaps.py -k call_count_switch"]),
    Mutation("judge-no-recheck", "wrong after timing is output_cache",
             "harness/kgym_harness/judge.py",
             "            if fail:\n                self.result[\"mismatch\"] = dict(fail, trial=where)",
             "            if False:\n                self.result[\"mismatch\"] = dict(fail, trial=where)",
             [f"{CPU_VERDICTS} -k test_output_cache_caught_by_recheck"]),
    Mutation("judge-no-unexplained-time", "time the claims leave unexplained is timer_tamper",
             "harness/kgym_harness/judge.py", "        if unexplained > 0:\n",
             "        if False:\n", [f"{CPU_VERDICTS} -k stalling_every_timing_phase"]),
    Mutation("judge-no-input-fingerprint", "timing on other inputs than the judge's is "
             "timer_tamper", "harness/kgym_harness/judge.py",
             "if not loader.fingerprints_match(mine, claim):", "if False:",
             [f"{CPU_VERDICTS} -k shrinking_the_timing_inputs"]),
    Mutation("judge-no-replaced-functions", "replaced measuring functions are timer_tamper",
             "harness/kgym_harness/judge.py", "        if self.remote.tamper:\n",
             "        if False:\n", [f"{CPU_VERDICTS} -k replaced_clock"]),
    Mutation("judge-no-precision-evidence", "low-precision kernels on an fp32 problem are "
             "precision_downgrade", "harness/kgym_harness/judge.py",
             "        found = sorted(self.low_precision)\n",
             "        return\n        found = sorted(self.low_precision)\n",
             ["tests/harness/test_integrity_gaps.py -k converting_to_fp16"]),
    Mutation("trustclock-claims-unchecked", "a claim below what the judge's clock allows "
             "is capped or timer_tamper", "harness/kgym_harness/trustclock.py",
             "    if cand_median >= floor:\n        return out\n",
             "    if True:\n        return out\n",
             [f"{TRUSTED} -k 'far_below or quarter or lead or beyond'"]),
    Mutation("trustclock-cpu-reference-ratio", "on the CPU the reference's wall/timed "
             "ratio does not lower the candidate's floor", "harness/kgym_harness/trustclock.py",
             "rho = max(w_r / ref_median, 1.0) if cuda else 1.0",
             "rho = max(w_r / ref_median, 1.0)",
             ["tests/harness/test_trusted_clock.py -k ratio"]),
    Mutation("trustclock-cpu-time-ignored", "on the CPU a claim far below the candidate's "
             "own CPU time per call (/proc) is timer_tamper", "harness/kgym_harness/trustclock.py",
             "    if not cuda and work_ms is not None:  # whatever the wall blocks' figures\n",
             "    if False:\n",
             [f"{TRUSTED} -k 'own_cpu_time or follows_the_load or with_its_reason'"]),
    Mutation("trustclock-cpu-load-unscaled", "the CPU-time bound follows the load the "
             "claims ran under", "harness/kgym_harness/trustclock.py",
             "cpu_floor = work_ms * load / (1 + CPU_TOL) - cpu_slack_ms",
             "cpu_floor = work_ms / (1 + CPU_TOL) - cpu_slack_ms",
             [f"{TRUSTED} -k follows_the_load"]),
    Mutation("trustclock-cpu-median-unbounded", "on the CPU the claims' median is held to "
             "the candidate's CPU time, not only their mean", "harness/kgym_harness/trustclock.py",
             "if mean < cpu_floor or cand_median < median_floor:", "if mean < cpu_floor:",
             [f"{TRUSTED} -k padded_above"]),
    Mutation("trustclock-cuda-lead-unbounded", "on CUDA the lead excuses a claim only up to "
             "the host work the kernel saw", "harness/kgym_harness/trustclock.py",
             "allow = (lead_ms if host_ms is None else min(lead_ms, host_ms)) if cuda else 0.0",
             "allow = lead_ms if cuda else 0.0",
             [f"{TRUSTED} -k host_work_seen"]),
    Mutation("trustclock-cap-ignored", "a capped claim lowers the reported speedup",
             "harness/kgym_harness/judge.py",
             "            self.result[\"speedup\"] = min(self.result[\"speedup\"], clock[\"cap\"])\n",
             "            pass\n", [f"{TRUSTED} -k capped_claim"]),
    Mutation("wallclock-prints-unchecked", "a wall block's prints must match the "
             "reference's", "harness/kgym_harness/wallclock.py",
             "            if not _finite(x) or abs(float(x) - y) > bound:\n",
             "            if False:\n", [f"{TRUSTED} -k 'prints or print_needs'"]),
    Mutation("judge-no-precision64", "an error far above the fp32 reference's own against "
             "its float64 evaluation is precision_downgrade", "harness/kgym_harness/precision.py",
             "    return e_c > kappa * e_ref and e_c > floor * norm and e_c <= CEIL * norm\n",
             "    return False\n",
             ["tests/harness/test_precision64.py -k lost_precision"]),
    Mutation("judge-speedup-not-rechecked", "a speedup above the bound is evaluated again",
             "harness/kgym_harness/judge.py",
             "        return (s is not None and s > self.req[\"speedup_recheck_bound\"]",
             "        return (False and s > self.req[\"speedup_recheck_bound\"]",
             ["tests/harness/test_integrity_speedup.py -k rechecked"]),
]
