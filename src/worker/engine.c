/* engine.c - the worker engine's API (engine.h) and its step loop: start
 * queued tasks, wait for the children, read them, and move each slot on
 * through its states (engine_impl.h) until its result goes out. */
#include <assert.h>
#include <poll.h>
#include <stdlib.h>

#include "common/clock.h"
#include "worker/engine_impl.h"

int kg_engine_submit(kg_engine *e, json_t *task, void *user, kg_err *err)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    p->task = json_incref(task);
    p->user = user;
    p->t_submit = kg_now_ms();
    e->last_interp = eng_task_interp(e, task);
    e->last_prof = eng_task_prof(task);
    if (e->tail)
        e->tail->next = p;
    else
        e->head = p;
    e->tail = p;
    e->npending++;
    return 0;
}

/* The queue's head, taken off the queue (the caller frees it). */
static struct pending *pop_pending(kg_engine *e)
{
    struct pending *p = e->head;
    assert(p && e->npending > 0);
    e->head = p->next;
    if (!e->head)
        e->tail = NULL;
    e->npending--;
    return p;
}

/* A task that could not start: infra_error / SPAWN_FAILED, and the slot is
 * freed with whatever of its pair was made. */
static void fail_start(kg_engine *e, struct slot *sl, const kg_err *serr,
                       kg_engine_done_fn done, void *ctx)
{
    eng_kill_child(&sl->cand);
    eng_kill_child(&sl->judge);
    json_t *r = eng_verdict(sl, "infra_error", "SPAWN_FAILED", serr->msg);
    eng_stamp(e, sl, r);
    eng_hand_out(done, ctx, sl, r);
    json_decref(r);
    eng_free_slot(e, sl);
}

/* A task whose problem cannot fit on the device even alone (its footprint,
 * foot bytes, is more than the usable memory): problem_error naming both
 * sizes (the problem's, not the candidate's fault), without starting
 * anything. */
static void refuse_too_large(kg_engine *e, struct slot *sl, struct pending *p,
                             double foot, kg_engine_done_fn done, void *ctx)
{
    slot_clear(sl);
    sl->task = p->task;
    sl->user = p->user;
    sl->t_submit = p->t_submit;
    sl->alone = p->alone; /* a rerun's result still says so */
    sl->rerun = p->rerun;
    sl->t_start = sl->t_spawned = kg_now_ms();
    slot_set_state(sl, S_RUNNING);
    char msg[300];
    snprintf(msg, sizeof msg,
             "the problem's footprint is %.1f GiB of device memory (the "
             "least its judge holds; about %.0fx that with the candidate); "
             "the device has %.1f GiB (%.0f%% usable): it cannot run here",
             foot / 1073741824.0, MEM_FACTOR, e->dev_total / 1073741824.0,
             MEM_SHARE * 100);
    json_t *r = eng_verdict(sl, "problem_error", "PROBLEM_ERROR", msg);
    eng_stamp(e, sl, r);
    eng_hand_out(done, ctx, sl, r);
    json_decref(r);
    eng_free_slot(e, sl);
    free(p);
}

/* Starts what fits into the free slots: on a free device slot, or staged
 * in a warm spare (only a spare can be staged: its go pipe takes the
 * grant). Nothing starts while a device probe is due. */
static void start_queued(kg_engine *e, kg_engine_done_fn done, void *ctx)
{
    /* a rerun alone (engine_rerun.c) waits or runs: no spare is kept, so
     * it starts in a pair of its own with nothing else on the device */
    if (eng_alone_gate(e) != GATE_OPEN)
        eng_drop_spares(e);
    for (int i = 0; i < e->nslots && e->head && !e->need_probe; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_FREE)
            continue;
        if (eng_alone_gate(e) == GATE_SHUT)
            break; /* the device is kept for a rerun alone */
        int running;
        double foot = eng_task_footprint(e, e->head->task);
        if (eng_hold_unknown(e, foot))
            break; /* unknown: it starts once the one before has told its size */
        double need = eng_need_of(e, foot);
        double held = eng_mem_held(e->slots, e->nslots, &running);
        int adm = eng_mem_admit(need, foot, held, running, e->dev_total,
                                MEM_SHARE);
        if (adm == ADMIT_WAIT)
            break; /* in order: it starts when the others' memory is back */
        if (adm == ADMIT_NEVER) {
            refuse_too_large(e, sl, pop_pending(e), foot, done, ctx);
            continue;
        }
        int staged =
            eng_device_slots_used(e->slots, e->nslots) >= e->cfg.concurrency;
        if (staged && !eng_take_spare(e, e->head->task))
            break;
        struct pending *p = pop_pending(e);
        kg_err serr;
        if (eng_start_task(e, sl, p, staged, &serr))
            fail_start(e, sl, &serr, done, ctx);
        free(p);
    }
}

/* Waits up to timeout_ms, or to the nearest deadline of a running task, for
 * the zygote's reports or output of any child. */
static void wait_events(kg_engine *e, int timeout_ms)
{
    struct pollfd pf[1 + 3 * MAX_SLOTS + 2 * MAX_SPARES];
    int np = 0;
    double wake = kg_now_ms() + timeout_ms;
    if (e->zy)
        pf[np++] = (struct pollfd){.fd = kg_zygote_fd(e->zy), .events = POLLIN};
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (!slot_active(sl))
            continue;
        int fds[3] = {sl->res_fd, sl->judge.log_fd, sl->cand.log_fd};
        for (int k = 0; k < 3; k++)
            if (fds[k] >= 0)
                pf[np++] = (struct pollfd){.fd = fds[k], .events = POLLIN};
        /* timed out (killed, exits awaited): the last resort's deadline */
        double dl = sl->state == S_TIMED_OUT ? sl->deadline + KILL_GRACE_MS
                                             : sl->deadline;
        if (dl < wake)
            wake = dl;
    }
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE)
            continue;
        if (sp->judge.log_fd >= 0)
            pf[np++] =
                (struct pollfd){.fd = sp->judge.log_fd, .events = POLLIN};
        if (sp->cand.log_fd >= 0)
            pf[np++] = (struct pollfd){.fd = sp->cand.log_fd, .events = POLLIN};
    }
    assert(np <= (int)(sizeof pf / sizeof pf[0]));
    int wait = (int)(wake - kg_now_ms());
    if (!e->zy && wait > 50)
        wait = 50; /* fresh mode: exits are found by waitpid */
    if (wait < 0)
        wait = 0;
    poll(pf, (nfds_t)np, wait);
}

/* Reads every pipe that has data and notes every exit that is in. */
static void read_children(kg_engine *e)
{
    eng_collect_exits(e);
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (!slot_active(sl))
            continue;
        eng_drain_result(sl);
        eng_take_notes(e, sl);
        eng_drain_log(e, &sl->judge, "judge");
        eng_drain_log(e, &sl->cand, "candidate");
    }
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE)
            continue;
        eng_drain_log(e, &sp->judge, "spare judge");
        eng_drain_log(e, &sp->cand, "spare candidate");
    }
    eng_collect_exits(e);
}

/* Past its deadline: the result will be a timeout, and both children are
 * killed (again, each step, until their exits are in). */
static void time_out(struct slot *sl)
{
    if (sl->state != S_TIMED_OUT)
        slot_set_state(sl, S_TIMED_OUT);
    eng_kill_pair(sl);
}

/* Moves one task on at time t: its frame in (release, and the result out
 * early if it can go), its deadline, the last resort's, a judge that
 * lingers after its frame, a candidate left when the judge is done, and
 * its result once both children are gone. */
static void decide(kg_engine *e, struct slot *sl, double t,
                   kg_engine_done_fn done, void *ctx)
{
    if ((sl->state == S_STAGED || sl->state == S_RUNNING) && sl->res_fd < 0 &&
        sl->t_judge_done && sl->res.d.len > 0) {
        eng_release_children(sl);
        if (!(sl->judge.exited && sl->cand.exited) &&
            eng_finish_early(e, sl, done, ctx))
            return;
    }
    int judge_done = sl->judge.exited && sl->res_fd < 0;
    if (t >= sl->deadline + KILL_GRACE_MS) {
        /* the clock of last resort: killed children whose exits never
         * arrive (stuck in the kernel, reaped elsewhere) do not hold the
         * slot, or the worker, forever */
        if (sl->res_fd >= 0) /* no finished frame */
            time_out(sl);
        else
            eng_kill_pair(sl);
        eng_drain_log(e, &sl->cand, "candidate");
        eng_finish(e, sl, done, ctx);
        return;
    }
    if (!judge_done && sl->res_fd < 0 && t - sl->t_judge_done > KILL_GRACE_MS)
        eng_kill_child(&sl->judge); /* frame delivered, the judge lingers */
    if (!judge_done && t >= sl->deadline) {
        time_out(sl);
        return; /* exits arrive in the next step */
    }
    if (judge_done && !sl->cand.exited)
        eng_kill_child(&sl->cand); /* the judge is done: so is the candidate */
    if (judge_done && sl->cand.exited) {
        eng_drain_log(e, &sl->cand, "candidate");
        eng_finish(e, sl, done, ctx);
    }
}

int kg_engine_step(kg_engine *e, int timeout_ms, kg_engine_done_fn done,
                   void *ctx, kg_err *err)
{
    assert(e->nslots >= 1 && e->nslots <= MAX_SLOTS);
    if (e->zy && !kg_zygote_alive(e->zy)) {
        int rc = eng_restart_zygote(e, err);
        if (rc)
            return rc;
    }
    start_queued(e, done, ctx);
    eng_grant_device(e);
    eng_top_up_spares(e);
    eng_note_company(e);
    if (e->nstale)
        eng_retry_stale(e, 0);
    wait_events(e, timeout_ms);
    read_children(e);
    double t = kg_now_ms();
    for (int i = 0; i < e->nslots; i++)
        if (slot_active(&e->slots[i]))
            decide(e, &e->slots[i], t, done, ctx);
    eng_settle_dying(e);
    if (e->need_probe)
        eng_settle_probe(e, done, ctx);
    eng_grant_device(e);

    /* pairs still exiting count: a caller that stops at 0 leaves none */
    int busy = e->npending;
    for (int i = 0; i < e->nslots; i++)
        busy += e->slots[i].state != S_FREE;
    for (int i = 0; i < MAX_DYING; i++)
        busy += e->dying[i].state == S_DYING;
    return busy;
}

int kg_engine_cancel(kg_engine *e, void *user)
{
    for (struct pending **pp = &e->head, *prev = NULL; *pp;
         prev = *pp, pp = &(*pp)->next) {
        struct pending *p = *pp;
        if (p->user != user)
            continue;
        *pp = p->next;
        if (e->tail == p)
            e->tail = prev;
        e->npending--;
        json_decref(p->task);
        json_decref(p->rerun);
        free(p);
        return 1;
    }
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state == S_FREE || sl->user != user)
            continue;
        /* as kg_engine_free does for one slot: the zygote's later exit
         * reports name pids no slot holds any more, and are ignored */
        if (slot_active(sl))
            eng_kill_pair(sl);
        eng_free_slot(e, sl);
        return 1;
    }
    return 0;
}

const json_t *kg_engine_info(const kg_engine *e)
{
    return e->zy ? kg_zygote_info(e->zy) : NULL;
}

void kg_engine_free(kg_engine *e)
{
    if (!e)
        return;
    for (int i = 0; i < MAX_SLOTS; i++) {
        struct slot *sl = &e->slots[i];
        if (slot_active(sl))
            eng_kill_pair(sl);
        if (sl->state != S_FREE)
            eng_free_slot(e, sl);
    }
    while (e->head) {
        struct pending *p = e->head;
        e->head = p->next;
        json_decref(p->task);
        json_decref(p->rerun);
        free(p);
    }
    for (int i = 0; i < MAX_DYING; i++) {
        struct slot *dy = &e->dying[i];
        if (dy->state != S_DYING)
            continue;
        eng_kill_pair(dy);
        eng_free_slot(e, dy);
    }
    eng_drop_spares(e);
    eng_retry_stale(e, 10000);
    kg_zygote_stop(e->zy);
    kg_sandbox_filter_free(&e->filter);
    free(e);
}
