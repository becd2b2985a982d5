/* engine_spare.c - the warm spare pool: judge+candidate pairs forked before
 * their task (docs/worker.md, "Warm spares"). Which spare a task takes, how
 * many to keep, and fewer when the device's memory runs low. */
#include "worker/engine_impl.h"

/* The spare for a task of this interp and prof among spares[0..n), or NULL:
 * one whose children are both alive and that suits the task (interp must
 * match), preferably one that warmed the profiler when the task profiles,
 * and of those the oldest, the one most likely done warming (a younger one
 * would make the task wait for the rest of its start-up). */
struct slot *eng_spare_pick(struct slot *spares, int n, int interp, int prof)
{
    struct slot *best = NULL;
    for (int i = 0; i < n; i++) {
        struct slot *sp = &spares[i];
        if (sp->state != S_SPARE || sp->interp != interp || sp->judge.exited ||
            sp->cand.exited)
            continue;
        if (!best)
            best = sp;
        else if ((sp->prof >= prof) != (best->prof >= prof)) {
            if (sp->prof >= prof)
                best = sp;
        } else if (sp->t_spawned < best->t_spawned)
            best = sp;
    }
    return best;
}

/* The spare for task, or NULL (none, or no zygote: fresh mode has none). */
struct slot *eng_take_spare(kg_engine *e, const json_t *task)
{
    if (!e->zy)
        return NULL;
    return eng_spare_pick(e->spares, MAX_SPARES, eng_task_interp(e, task),
                          eng_task_prof(task));
}

/* The spares wanted at most, before memory: prewarm, or the non-profiling
 * default while the newest task does not profile. */
int eng_spare_cap(const kg_engine *e)
{
    return e->prewarm_noprof && !e->last_prof ? e->prewarm_noprof : e->prewarm;
}

/* How many spares to keep: as many as the queue can use plus idle_warm, at
 * most cap and, when memory set one (>= 0), at most mem_cap. */
int eng_spare_want(int npending, int idle_warm, int cap, int mem_cap)
{
    int want = npending + idle_warm;
    if (mem_cap >= 0 && cap > mem_cap)
        cap = mem_cap;
    return want > cap ? cap : want;
}

/* The memory cap after a spare's warm-up left free_mib of total free:
 * below floor x total, two spares fewer than now (mem_cap, or cap when
 * there is none: -1), at least one; with twice that free, one more, and
 * none (-1) once that reaches cap. */
int eng_spare_mem_cap(int mem_cap, int cap, double free_mib, double total,
                      double floor)
{
    int now = mem_cap >= 0 ? mem_cap : cap;
    if (free_mib < floor * total && now > 1)
        return now > 2 ? now - 2 : 1;
    if (mem_cap >= 0 && free_mib >= 2 * floor * total)
        return mem_cap + 1 >= cap ? -1 : mem_cap + 1;
    return mem_cap;
}

/* Spares hold device memory (about 2 GiB a pair on the H200) that tasks
 * may need: a warm spare's judge reports the device's free and total
 * memory at the end of its warm-up (timings.warm_spare.mem_mib; the host's
 * on a cpu worker), and the cap follows it (eng_spare_mem_cap, with the
 * floor cfg.spare_mem_floor, --spare-mem-floor, default 0.25). */
void eng_note_memory(kg_engine *e, const struct slot *sl, json_t *r)
{
    eng_note_footprint(e, sl, r); /* admission by memory (engine_admit.c) */
    json_t *m = json_object_get(
        json_object_get(json_object_get(r, "timings"), "warm_spare"),
        "mem_mib");
    if (!sl->warm || !json_is_array(m) || json_array_size(m) != 2)
        return;
    double free_mib = json_number_value(json_array_get(m, 0));
    double total = json_number_value(json_array_get(m, 1));
    if (!(total > 0) || free_mib < 0)
        return;
    int next = eng_spare_mem_cap(e->spare_mem_cap, eng_spare_cap(e), free_mib,
                                 total, e->mem_floor);
    if (next >= 0 && (e->spare_mem_cap < 0 || next < e->spare_mem_cap))
        kg_warn("device memory low after a warm spare's start-up (%.0f of "
                "%.0f MiB free): at most %d spare(s) now",
                free_mib, total, next);
    e->spare_mem_cap = next;
}

static void drop_spare(kg_engine *e, struct slot *sp)
{
    eng_kill_pair(sp);
    eng_free_slot(e, sp);
}

/* Drops the spares whose judge or candidate died before their task and
 * returns how many are alive. After three such deaths in a row the engine
 * keeps no spares: a spare that cannot start would be forked every step. */
static int prune_spares(kg_engine *e)
{
    int live = 0;
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE)
            continue;
        if (!sp->judge.exited && !sp->cand.exited) {
            live++;
            continue;
        }
        eng_drain_log(e, &sp->judge, "spare judge");
        eng_drain_log(e, &sp->cand, "spare candidate");
        eng_log_verbose(e, "a warm spare died: %s%s",
                        eng_tail_of(&sp->judge.log, 300),
                        eng_tail_of(&sp->cand.log, 300));
        drop_spare(e, sp);
        if (++e->spare_deaths == 3 && e->prewarm) {
            kg_warn("warm spares keep dying before their task; starting "
                    "pairs per task instead");
            e->prewarm = e->idle_warm = e->prewarm_noprof = 0;
        }
    }
    return live;
}

/* Keeps warm spares ready for the newest task's kind: as many as the queue
 * can use, at most the cap; with nothing queued, idle_warm. None while the
 * device is in doubt or in fresh mode. */
void eng_top_up_spares(kg_engine *e)
{
    int live = prune_spares(e);
    if (!e->zy || e->need_probe || e->device_bad ||
        eng_alone_gate(e) != GATE_OPEN) /* the device kept for a rerun */
        return;
    int want = eng_spare_want(e->npending, e->idle_warm, eng_spare_cap(e),
                              e->spare_mem_cap);
    for (int i = 0; i < MAX_SPARES && live < want; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_FREE)
            continue;
        slot_clear(sp);
        sp->interp = e->last_interp;
        sp->prof = e->last_prof;
        slot_set_state(sp, S_SPARE);
        kg_err serr;
        if (eng_spawn_pair(e, sp, &serr)) {
            eng_log_verbose(e, "warm spare: %s", serr.msg);
            drop_spare(e, sp);
            return; /* try again next step */
        }
        live++;
    }
}

/* Kills every spare (a zygote restart, a device in doubt, the end). */
void eng_drop_spares(kg_engine *e)
{
    for (int i = 0; i < MAX_SPARES; i++)
        if (e->spares[i].state == S_SPARE)
            drop_spare(e, &e->spares[i]);
}
