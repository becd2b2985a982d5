/* engine_result.c - a task's result: the judge's frame when the engine read
 * it complete, else a verdict the engine writes itself (timeout,
 * runtime_error, problem_error, infra_error); stamped, finalized and handed
 * out, early (before the pair's exits) when nothing in it depends on them. */
#include <assert.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/result.h"
#include "common/clock.h"
#include "common/request.h"
#include "worker/engine_impl.h"
#include "worker/frame.h"

static void describe_status(char *out, size_t n, const char *who,
                            const struct child *c)
{
    if (!c->exited)
        snprintf(out, n, "%s still running", who);
    else if (WIFSIGNALED(c->status))
        snprintf(out, n, "%s killed by signal %d (%s)", who,
                 WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
    else
        snprintf(out, n, "%s exited with status %d", who,
                 WEXITSTATUS(c->status));
}

/* A verdict the engine writes itself: the judge did not deliver. New
 * reference. */
json_t *eng_verdict(struct slot *sl, const char *verdict, const char *code,
                    const char *msg)
{
    kg_request_view req;
    kg_request_view_of(sl->task, &req);
    json_t *r = kg_result_new(req.task_id, verdict, code, "worker", msg);
    json_object_set_new(json_object_get(r, "error"), "traceback",
                        json_string(eng_tail_of(&sl->cand.log, 2000)));
    return r;
}

/* Every result leaves the engine here, in the form clients may read alone
 * (kg_result_finalize: no reward-bearing figure on a verdict other than
 * pass). r stays the caller's. */
void eng_hand_out(kg_engine_done_fn done, void *ctx, struct slot *sl, json_t *r)
{
    assert(r && sl->task);
    eng_rerun_mark(sl, r);
    kg_result_finalize(r);
    done(ctx, sl->user, r);
}

/* A judge that ended by itself (not SIGKILL: the OOM killer, or us) without
 * a frame while running the reference's code was ended by the reference
 * (os._exit, a crash in it), not by the candidate: problem_error. The judge
 * says which reference code runs, if any, in its TMPDIR's marker
 * (harness/kgym_harness/frame.py MARK_FILE: one 64-byte record, the phase,
 * NUL-padded). NULL when that is not so. */
static json_t *problem_verdict(struct slot *sl, const char *js)
{
    const struct child *j = &sl->judge;
    char path[PATH_MAX + 16], phase[65] = {0};
    if (!j->exited || !j->wd[0] ||
        (WIFSIGNALED(j->status) && WTERMSIG(j->status) == SIGKILL) ||
        eng_pathf(path, sizeof path, "%s/kgym-phase", j->wd))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, phase, sizeof phase - 1);
    close(fd);
    if (n <= 0 || strncmp(phase, "reference:", 10))
        return NULL;
    for (const char *p = phase; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || *p == '_' || *p == ':'))
            return NULL;
    char msg[512], fb[1024];
    snprintf(msg, sizeof msg,
             "the reference (problem) is at fault, not the kernel: the %s "
             "while running reference code (%s)",
             js, phase);
    json_t *r = eng_verdict(sl, "problem_error", "PROBLEM_ERROR", msg);
    json_t *err = json_object_get(r, "error");
    json_object_set_new(err, "phase", json_string(phase));
    json_object_set_new(err, "traceback",
                        json_string(eng_tail_of(&sl->judge.log, 2000)));
    snprintf(fb, sizeof fb,
             "Verdict: problem_error (PROBLEM_ERROR)\nThe problem's reference "
             "failed, not your kernel: this attempt is not scored.\n  %s\n",
             msg);
    json_object_set_new(r, "feedback", json_string(fb));
    return r;
}

/* The judge only saw the channel close; the worker knows how the candidate
 * ended (signal or exit status, cs): a CHILD_DIED frame's message, and the
 * feedback the policy reads, say it too. */
static void name_candidate_exit(struct slot *sl, json_t *r, const char *cs)
{
    const char *code = json_string_value(json_object_get(r, "error_code"));
    const char *em0 = json_string_value(json_object_get(r, "error_message"));
    char em[512], msg[1024]; /* em: a copy, the string is replaced below */
    snprintf(em, sizeof em, "%s", em0 ? em0 : "");
    int by_us = sl->cand.killed && WIFSIGNALED(sl->cand.status) &&
                WTERMSIG(sl->cand.status) == SIGKILL;
    if (!code || strcmp(code, "CHILD_DIED") || !*em || !sl->cand.exited ||
        by_us)
        return;
    snprintf(msg, sizeof msg, "%s (%s)", em, cs);
    json_object_set_new(r, "error_message", json_string(msg));
    json_t *er = json_object_get(r, "error");
    if (json_is_object(er))
        json_object_set_new(er, "message", json_string(msg));
    const char *fb = json_string_value(json_object_get(r, "feedback"));
    const char *at = fb ? strstr(fb, em) : NULL;
    if (!at)
        return;
    size_t pre = (size_t)(at - fb), elen = strlen(em);
    size_t n = strlen(fb) + strlen(cs) + 4;
    char *nf = malloc(n);
    if (nf) {
        snprintf(nf, n, "%.*s%s (%s)%s", (int)pre, fb, em, cs, at + elen);
        json_object_set_new(r, "feedback", json_string(nf));
        free(nf);
    }
}

/* The task's result (new reference): a timeout, the judge's frame, or the
 * engine's verdict when the frame is missing or broken. */
static json_t *build_result(struct slot *sl)
{
    char js[256], cs[256], msg[1024];
    describe_status(js, sizeof js, "judge", &sl->judge);
    describe_status(cs, sizeof cs, "candidate", &sl->cand);
    if (sl->state == S_TIMED_OUT) {
        kg_request_view req;
        kg_request_view_of(sl->task, &req);
        double t = req.timeout_s;
        snprintf(
            msg, sizeof msg,
            "evaluation exceeded its timeout of %.0f s and was killed (%s; %s)",
            t, js, cs);
        return eng_verdict(sl, "timeout", "TIMEOUT", msg);
    }
    kg_err ferr = {{0}};
    json_t *r = NULL;
    if (sl->res.d.len > 0)
        r = kg_frame_parse(sl->res.d.p, sl->res.d.len, &ferr);
    else
        snprintf(ferr.msg, sizeof ferr.msg, "no result frame");
    if (!r && (r = problem_verdict(sl, js)))
        return r;
    if (!r) {
        snprintf(msg, sizeof msg,
                 "the evaluation ended without a complete result (%s; %s; %s)",
                 ferr.msg, js, cs);
        const char *t = eng_tail_of(&sl->cand.log, 300);
        if (*t && strlen(msg) + strlen(t) + 32 < sizeof msg) {
            strcat(msg, "; candidate output: ");
            strcat(msg, t);
        }
        return eng_verdict(sl, "runtime_error", "CHILD_DIED", msg);
    }
    /* The frame is the judge's; the engine owns status, device and clock. */
    json_object_set_new(r, "status", json_string("completed"));
    json_t *tid = json_object_get(sl->task, "task_id");
    if (tid)
        json_object_set(r, "task_id", tid);
    if (WIFSIGNALED(sl->cand.status) && sl->cand.exited &&
        sl->cand.status != SIGKILL)
        json_object_set_new(r, "candidate_exit", json_string(cs));
    name_candidate_exit(sl, r, cs);
    return r;
}

/* Where the engine's own start went, on its first result (a cold kgym
 * eval's wall beyond the task): kg_engine_new to the zygote ready, the
 * zygote's imports within it, and to this task's start (its pair's warm-up
 * is timings.warm_spare). Milliseconds. */
static void stamp_engine_start(kg_engine *e, struct slot *sl, json_t *t)
{
    if (e->start_stamped || !e->zy)
        return;
    e->start_stamped = 1;
    const json_t *info = kg_zygote_info(e->zy);
    json_t *s = json_object();
    json_object_set_new(s, "zygote_ready",
                        json_real(e->t_zygote_ready - e->t_created));
    const char *keys[] = {"import_ms", "cpp_extension_ms", "meta_ms"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(info, keys[i]);
        if (json_is_number(v))
            json_object_set(s, keys[i], v);
    }
    json_object_set_new(s, "submitted", json_real(sl->t_submit - e->t_created));
    json_object_set_new(s, "task_start", json_real(sl->t_start - e->t_created));
    json_object_set_new(t, "engine_start", s);
}

/* The engine's part of a result: the queue, spawn and total times, and
 * which worker, device and mode ran it. */
void eng_stamp(kg_engine *e, struct slot *sl, json_t *r)
{
    double end = kg_now_ms();
    json_t *t = json_object_get(r, "timings");
    if (!json_is_object(t)) {
        t = json_object();
        json_object_set_new(r, "timings", t);
    }
    json_object_set_new(t, "queued", json_real(sl->t_start - sl->t_submit));
    json_object_set_new(t, "spawn", json_real(sl->t_spawned - sl->t_start));
    json_object_set_new(t, "total", json_real(end - sl->t_start));
    stamp_engine_start(e, sl, t);
    json_t *d = json_object_get(r, "device");
    if (!json_is_object(d)) {
        d = json_object();
        json_object_set_new(r, "device", d);
    }
    json_object_set_new(
        d, "worker_id",
        json_string(e->cfg.worker_id ? e->cfg.worker_id : "local"));
    json_object_set_new(d, "device", json_string(e->cfg.device));
    json_object_set(d, "backend", json_object_get(sl->task, "backend"));
    json_object_set_new(d, "mode",
                        json_string(!e->zy     ? "fresh"
                                    : sl->warm ? "zygote+warm"
                                               : "zygote"));
}

/* A CUDA failure puts the device in doubt: CUDA_ERROR, or on a GPU worker a
 * candidate ended by a signal not ours. */
static int is_cuda_failure(kg_engine *e, struct slot *sl, json_t *r)
{
    if (strncmp(e->cfg.device, "cuda", 4))
        return 0;
    const char *code = json_string_value(json_object_get(r, "error_code"));
    if (code && !strcmp(code, "CUDA_ERROR"))
        return 1;
    return sl->cand.exited && WIFSIGNALED(sl->cand.status) &&
           WTERMSIG(sl->cand.status) != SIGKILL;
}

/* Finishes a task whose children are gone (or given up on): its result goes
 * out and the slot is freed, or, while a device probe is due, the result is
 * held (S_HELD) for eng_settle_probe. */
void eng_finish(kg_engine *e, struct slot *sl, kg_engine_done_fn done,
                void *ctx)
{
    assert(slot_active(sl));
    json_t *r = build_result(sl);
    eng_stamp(e, sl, r);
    eng_note_memory(e, sl, r);
    if (is_cuda_failure(e, sl, r)) {
        e->need_probe = 1;
        eng_drop_spares(e); /* their contexts may be on a broken device */
    }
    if (eng_rerun_take(e, sl, r)) { /* out of memory beside others */
        json_decref(r);
        eng_free_slot(e, sl);
        return;
    }
    if (e->need_probe) {
        sl->held = r;
        slot_set_state(sl, S_HELD);
        return;
    }
    eng_hand_out(done, ctx, sl, r);
    json_decref(r);
    eng_free_slot(e, sl);
}

/* The result of a released slot (frame complete, children sent SIGKILL),
 * handed out without waiting for the exits, which on a GPU tear CUDA
 * contexts down (docs/worker.md, "What the engine guarantees"): the slot
 * takes its next task at once, and the pair waits in e->dying until both
 * exits are seen, when its cgroup, work dirs and uid are freed. Not when
 * the result needs how the children ended (CHILD_DIED names the
 * candidate's signal; a CUDA failure needs the probe), nor while a probe is
 * due, nor when the pairs alive could outgrow the candidate uids. Returns 1
 * when the result went out. */
int eng_finish_early(kg_engine *e, struct slot *sl, kg_engine_done_fn done,
                     void *ctx)
{
    assert(sl->state == S_RELEASED);
    if (e->need_probe)
        return 0;
    struct slot *dy = NULL;
    int ndying = 0;
    for (int i = 0; i < MAX_DYING; i++) {
        if (e->dying[i].state == S_DYING)
            ndying++;
        else if (!dy)
            dy = &e->dying[i];
    }
    if (!dy || e->nslots + MAX_SPARES + ndying + 1 > CAND_UIDS)
        return 0;
    json_t *r = build_result(sl);
    const char *code = json_string_value(json_object_get(r, "error_code"));
    if ((code && !strcmp(code, "CHILD_DIED")) || is_cuda_failure(e, sl, r)) {
        json_decref(r);
        return 0;
    }
    eng_stamp(e, sl, r);
    eng_note_memory(e, sl, r);
    if (!eng_rerun_take(e, sl, r)) /* else queued again to run alone */
        eng_hand_out(done, ctx, sl, r);
    json_decref(r);
    eng_close_fd(&sl->res_fd);
    eng_close_fd(&sl->judge.log_fd); /* killed: nothing more to read */
    eng_close_fd(&sl->cand.log_fd);
    slot_move(dy, sl);
    slot_set_state(dy, S_DYING);
    dy->t_dying = kg_now_ms();
    return 1;
}

/* Frees the dying pairs whose exits are in, and those whose exits never
 * come (killed again, as the last resort of a running slot). */
void eng_settle_dying(kg_engine *e)
{
    double t = kg_now_ms();
    for (int i = 0; i < MAX_DYING; i++) {
        struct slot *dy = &e->dying[i];
        if (dy->state != S_DYING)
            continue;
        if (!(dy->judge.exited && dy->cand.exited)) {
            if (t < dy->t_dying + KILL_GRACE_MS)
                continue;
            eng_kill_pair(dy);
        }
        eng_free_slot(e, dy);
    }
}
