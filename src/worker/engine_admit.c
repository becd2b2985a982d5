/* engine_admit.c - starting a task: in a warm spare or a pair of its own,
 * on one of the concurrency device slots or staged (set up and compiled in
 * a spare, waiting for a slot), and granting freed slots to staged tasks,
 * oldest first. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/request.h"
#include "worker/engine_impl.h"

/* Device slots taken among slots[0..n): the tasks that started on one or
 * were granted one, until they are finished. At most cfg.concurrency. */
int eng_device_slots_used(const struct slot *slots, int n)
{
    int used = 0;
    for (int i = 0; i < n; i++)
        used += slot_active(&slots[i]) && slots[i].device;
    return used;
}

/* The staged task that gets the next device slot: the oldest (t_start), or
 * NULL when none waits or all concurrency slots are taken. */
struct slot *eng_admit_next(struct slot *slots, int n, int concurrency)
{
    if (eng_device_slots_used(slots, n) >= concurrency)
        return NULL;
    struct slot *best = NULL;
    for (int i = 0; i < n; i++) {
        struct slot *sl = &slots[i];
        if (sl->state == S_STAGED && (!best || sl->t_start < best->t_start))
            best = sl;
    }
    return best;
}

/* Free device slots go to staged tasks, oldest first: 'D' on the task pipe
 * their judge waits on after its set-up and compile (judge.wait_for_device).
 * Not while a device probe is due. */
void eng_grant_device(kg_engine *e)
{
    if (e->need_probe)
        return;
    struct slot *sl;
    while ((sl = eng_admit_next(e->slots, e->nslots, e->cfg.concurrency))) {
        slot_set_state(sl, S_RUNNING);
        char go = 'D';
        if (sl->task_fd >= 0 && write(sl->task_fd, &go, 1) != 1)
            eng_log_verbose(e, "a staged judge is gone: %s",
                            strerror(errno)); /* its exit ends the task */
        eng_close_fd(&sl->task_fd);
    }
    assert(eng_device_slots_used(e->slots, e->nslots) <= e->cfg.concurrency);
}

/* Hands a spare's judge its task: the task file in the judge's private work
 * dir (written whole, then renamed), then one byte on the go pipe, which a
 * staged task keeps open for its 'D'. */
static int give_task(kg_engine *e, struct slot *sl, kg_err *err)
{
    assert(sl->warm && sl->task_fd >= 0);
    char path[PATH_MAX + 16], tmp[PATH_MAX + 16];
    if (eng_pathf(path, sizeof path, "%s/task.json", sl->judge.wd) ||
        eng_pathf(tmp, sizeof tmp, "%s/task.json.tmp", sl->judge.wd))
        return kg_errf(err, KG_EINVAL, "work dir path too long");
    json_t *t = eng_judge_task(e, sl);
    int rc = json_dump_file(t, tmp, JSON_COMPACT);
    json_decref(t);
    if (rc || rename(tmp, path))
        return kg_errf(err, KG_EIO, "writing the task for the judge: %s",
                       strerror(errno));
    char go = 'T';
    if (write(sl->task_fd, &go, 1) != 1)
        return kg_errf(err, KG_EIO, "the warm judge is gone: %s",
                       strerror(errno));
    if (sl->state != S_STAGED)
        eng_close_fd(&sl->task_fd);
    return 0;
}

/* Starts p's task in the free slot sl: in the spare that suits it, else in
 * a pair forked now. staged: every device slot is taken, so the task waits
 * in its spare for one (only a spare has the go pipe that takes the 'D').
 * The slot owns p->task from here. 0, or a negative code with the slot
 * still to be finished by the caller. */
int eng_start_task(kg_engine *e, struct slot *sl, struct pending *p, int staged,
                   kg_err *err)
{
    assert(sl->state == S_FREE);
    struct slot *sp = eng_take_spare(e, p->task);
    if (sp) {
        e->spare_deaths = 0;
        slot_move(sl, sp);
        sl->warm = 1;
    } else {
        slot_clear(sl);
        sl->interp = eng_task_interp(e, p->task);
        sl->prof = eng_task_prof(p->task);
    }
    sl->task = p->task;
    sl->user = p->user;
    sl->t_submit = p->t_submit;
    sl->alone = p->alone;
    sl->rerun = p->rerun; /* the slot owns it from here */
    p->rerun = NULL;
    sl->need = eng_task_need(e, p->task);
    sl->sized = eng_task_footprint(e, p->task) > 0;
    sl->t_start = kg_now_ms();
    slot_set_state(sl, staged && sl->warm ? S_STAGED : S_RUNNING);
    kg_request_view req;
    kg_request_view_of(sl->task, &req);
    sl->deadline = sl->t_start + req.timeout_s * 1e3;
    if (sl->warm) {
        int rc = give_task(e, sl, err);
        sl->t_spawned = kg_now_ms();
        return rc;
    }
    return eng_spawn_pair(e, sl, err);
}

/* ---- admission by memory ------------------------------------------------ */

int eng_mem_admit(double need, double least, double held, int running,
                  double total, double share)
{
    if (!(need > 0) || !(total > 0))
        return ADMIT_GO;
    double budget = share * total;
    if (least > budget)
        return ADMIT_NEVER; /* even the least it holds cannot fit */
    /* a relative 1e-9 of slack: equal shares (eng_equal_share) of the
     * budget sum to it, not one rounding above */
    double fits = budget * (1 + 1e-9);
    /* alone it starts even when its bound (need) is above the budget: the
     * bound is MEM_FACTOR x, an honest task holds less, and its need held
     * keeps every other task waiting while it runs */
    if (running == 0 || held + need <= fits)
        return ADMIT_GO;
    return ADMIT_WAIT;
}

/* What a task of a problem not seen yet is admitted as needing: an equal
 * share of the usable memory (share x total) among the engine's slots
 * (concurrency + stage: every task that may be active at once, running or
 * staged, since eng_mem_held counts both). Slots full of such tasks fit
 * together; beside known tasks holding more, a first task waits instead of
 * running into an out of memory. 0 (ungated) while the device's size is
 * unknown. */
double eng_equal_share(double total, double share, int slots)
{
    if (!(total > 0) || slots < 1)
        return 0;
    return share * total / slots;
}

/* Bytes admitted to the active tasks among slots[0..n), and how many of
 * them there are (in *running). */
double eng_mem_held(const struct slot *slots, int n, int *running)
{
    double held = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!slot_active(&slots[i]))
            continue;
        held += slots[i].need;
        k++;
    }
    *running = k;
    return held;
}

/* FNV-1a of the task's reference code: which problem it is. */
uint64_t eng_problem_key(const json_t *task)
{
    const char *s = json_string_value(json_object_get(task, "reference_code"));
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The bytes a task's problem footprint is known as, or 0 when no result
 * of its problem has told it yet. */
double eng_task_footprint(const kg_engine *e, const json_t *task)
{
    uint64_t key = eng_problem_key(task);
    for (int i = 0; i < e->nfoot; i++)
        if (e->foot[i].key == key)
            return e->foot[i].bytes;
    return 0;
}

/* MEM_FACTOR x the task's problem footprint; when not known yet (its
 * first task teaches it), an equal share of the device (eng_equal_share),
 * or 0 (ungated) while the device's size is not known either. */
double eng_task_need(const kg_engine *e, const json_t *task)
{
    return eng_need_of(e, eng_task_footprint(e, task));
}

double eng_need_of(const kg_engine *e, double footprint)
{
    if (footprint > 0)
        return MEM_FACTOR * footprint;
    return eng_equal_share(e->dev_total, MEM_SHARE, e->nslots);
}

/* Remembers a result's memory.footprint_bytes for its problem and
 * memory.device_total_bytes: what the judge measured over the reference's
 * first pass (memstat.footprint), never the candidate's; the largest
 * measured is kept. With memory.estimate true (a judge's note from its
 * set-up, before any pass: judge.py) it is an estimate, kept only until a
 * measured one comes, which replaces it whatever its size. */
void eng_note_footprint(kg_engine *e, const struct slot *sl, const json_t *r)
{
    const json_t *m = json_object_get(r, "memory");
    double total = json_number_value(json_object_get(m, "device_total_bytes"));
    if (total > 0)
        e->dev_total = total;
    double fp = json_number_value(json_object_get(m, "footprint_bytes"));
    if (!(fp > 0) || !sl->task)
        return;
    int estimate = json_is_true(json_object_get(m, "estimate"));
    uint64_t key = eng_problem_key(sl->task);
    for (int i = 0; i < e->nfoot; i++)
        if (e->foot[i].key == key) {
            if (estimate && !e->foot[i].estimated)
                return; /* measured stands */
            if (fp > e->foot[i].bytes || (!estimate && e->foot[i].estimated))
                e->foot[i].bytes = fp;
            e->foot[i].estimated = estimate;
            return;
        }
    int at = e->nfoot < MAX_FOOTPRINTS ? e->nfoot++ : (int)(key % MAX_FOOTPRINTS);
    e->foot[at].key = key;
    e->foot[at].bytes = fp;
    e->foot[at].estimated = estimate;
}

int eng_unsized_active(const kg_engine *e)
{
    for (int i = 0; i < e->nslots; i++)
        if (slot_active(&e->slots[i]) && !e->slots[i].sized)
            return 1;
    return 0;
}

int eng_hold_unknown(const kg_engine *e, double foot)
{
    return !(foot > 0) && eng_unsized_active(e);
}

void kg_engine_note_footprint(kg_engine *e, const char *reference_code,
                              double bytes, double device_total)
{
    struct slot sl;
    slot_clear(&sl);
    sl.task = json_object();
    json_object_set_new(sl.task, "reference_code", json_string(reference_code));
    json_t *r = json_object(), *m = json_object();
    json_object_set_new(m, "footprint_bytes", json_real(bytes));
    json_object_set_new(m, "device_total_bytes", json_real(device_total));
    json_object_set_new(r, "memory", m);
    eng_note_footprint(e, &sl, r);
    json_decref(r);
    json_decref(sl.task);
}
