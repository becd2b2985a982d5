/* test_engine_admission.c - the worker engine's decisions on plain slots,
 * with no process behind them (src/worker/engine_impl.h): the slot's state
 * transitions, device admission of staged tasks (engine_admit.c), which
 * warm spare a task takes and how many spares are kept (engine_spare.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "worker/engine_impl.h"

/* ---- fake slots -------------------------------------------------------- */

/* A task on a device slot since t_start: started on a free slot. */
static void running(struct slot *sl, double t_start)
{
    slot_clear(sl);
    slot_set_state(sl, S_RUNNING);
    sl->t_start = t_start;
}

/* A task staged in a spare since t_start, waiting for a device slot. */
static void staged(struct slot *sl, double t_start)
{
    slot_clear(sl);
    slot_set_state(sl, S_SPARE);
    slot_set_state(sl, S_STAGED);
    sl->t_start = t_start;
}

/* A warm spare forked at t_spawned for tasks of this interp and prof. */
static void spare(struct slot *sp, int interp, int prof, double t_spawned)
{
    slot_clear(sp);
    slot_set_state(sp, S_SPARE);
    sp->interp = interp;
    sp->prof = prof;
    sp->t_spawned = t_spawned;
}

/* Grants device slots as eng_grant_device does, without the pipe: the
 * indexes granted, in order, into order[]; returns how many. */
static int grant_all(struct slot *slots, int n, int concurrency, int *order)
{
    int k = 0;
    struct slot *sl;
    while ((sl = eng_admit_next(slots, n, concurrency))) {
        slot_set_state(sl, S_RUNNING);
        order[k++] = (int)(sl - slots);
    }
    return k;
}

/* ---- the state machine ------------------------------------------------- */

static void test_transitions_allowed(void **state)
{
    (void)state;
    /* a task's life, from a spare or a pair of its own */
    assert_true(slot_transition_ok(S_FREE, S_SPARE));
    assert_true(slot_transition_ok(S_SPARE, S_STAGED));
    assert_true(slot_transition_ok(S_SPARE, S_RUNNING));
    assert_true(slot_transition_ok(S_FREE, S_RUNNING));
    assert_true(slot_transition_ok(S_STAGED, S_RUNNING));
    assert_true(slot_transition_ok(S_RUNNING, S_RELEASED));
    assert_true(slot_transition_ok(S_STAGED, S_RELEASED));
    assert_true(slot_transition_ok(S_RELEASED, S_TIMED_OUT));
    assert_true(slot_transition_ok(S_RELEASED, S_DYING));
    assert_true(slot_transition_ok(S_TIMED_OUT, S_HELD));
    assert_true(slot_transition_ok(S_HELD, S_FREE));
    assert_true(slot_transition_ok(S_DYING, S_FREE));
    /* every state but S_FREE may be freed */
    for (int s = S_SPARE; s < S_NSTATES; s++)
        assert_true(slot_transition_ok((enum slot_state)s, S_FREE));
}

static void test_transitions_refused(void **state)
{
    (void)state;
    assert_false(slot_transition_ok(S_FREE, S_FREE));
    assert_false(slot_transition_ok(S_FREE, S_STAGED)); /* only a spare */
    assert_false(slot_transition_ok(S_FREE, S_DYING));  /* only released */
    assert_false(slot_transition_ok(S_RUNNING, S_STAGED));
    assert_false(slot_transition_ok(S_RUNNING, S_DYING)); /* not released */
    assert_false(slot_transition_ok(S_RUNNING, S_SPARE));
    assert_false(slot_transition_ok(S_TIMED_OUT, S_RELEASED));
    assert_false(slot_transition_ok(S_TIMED_OUT, S_DYING));
    assert_false(slot_transition_ok(S_HELD, S_RUNNING));
    assert_false(slot_transition_ok(S_DYING, S_RUNNING));
    assert_false(slot_transition_ok(S_SPARE, S_HELD));
    assert_false(slot_transition_ok(S_NSTATES, S_FREE));
    for (int s = 0; s < S_NSTATES; s++) /* no state to itself */
        assert_false(
            slot_transition_ok((enum slot_state)s, (enum slot_state)s));
}

/* A forbidden transition is a bug the engine stops at (assert: the build
 * keeps them), here in a child so the test goes on. */
static void test_forbidden_transition_aborts(void **state)
{
    (void)state;
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2); /* the assert's message */
        struct slot sl;
        slot_clear(&sl);
        slot_set_state(&sl, S_DYING);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGABRT);
}

static void test_running_takes_a_device_slot_until_cleared(void **state)
{
    (void)state;
    struct slot sl;
    staged(&sl, 1);
    assert_int_equal(sl.device, 0);
    slot_set_state(&sl, S_RUNNING);
    assert_int_equal(sl.device, 1);
    slot_set_state(&sl, S_RELEASED);
    assert_int_equal(sl.device, 1); /* its pair still tears down */
    slot_set_state(&sl, S_FREE);
    slot_clear(&sl);
    assert_int_equal(sl.device, 0);
    assert_int_equal(sl.res_fd, -1);
    assert_int_equal(sl.task_fd, -1);
}

static void test_slot_move_leaves_the_source_free(void **state)
{
    (void)state;
    struct slot sp, sl;
    spare(&sp, 0, 1, 5);
    sp.task_fd = 7;
    slot_clear(&sl);
    slot_move(&sl, &sp);
    assert_int_equal(sl.state, S_SPARE);
    assert_int_equal(sl.task_fd, 7);
    assert_int_equal(sl.prof, 1);
    assert_int_equal(sp.state, S_FREE);
    assert_int_equal(sp.task_fd, -1);
}

static void test_active_states(void **state)
{
    (void)state;
    struct slot sl;
    slot_clear(&sl);
    int want[S_NSTATES] = {
        [S_STAGED] = 1, [S_RUNNING] = 1, [S_RELEASED] = 1, [S_TIMED_OUT] = 1};
    for (int s = 0; s < S_NSTATES; s++) {
        sl.state = (enum slot_state)s;
        assert_int_equal(slot_active(&sl), want[s]);
    }
}

/* ---- device admission -------------------------------------------------- */

static void test_grant_oldest_staged_first(void **state)
{
    (void)state;
    struct slot s[5];
    running(&s[0], 1);
    staged(&s[1], 40);
    staged(&s[2], 10);
    staged(&s[3], 30);
    staged(&s[4], 20);
    int order[5];
    /* concurrency 3: one slot is taken, two go to the two oldest */
    assert_int_equal(grant_all(s, 5, 3, order), 2);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 4);
    assert_int_equal(eng_device_slots_used(s, 5), 3);
    assert_int_equal(s[3].state, S_STAGED);
    assert_int_equal(s[1].state, S_STAGED);
    /* the first task finishes: its slot goes to the next oldest */
    slot_set_state(&s[0], S_FREE);
    slot_clear(&s[0]);
    assert_int_equal(grant_all(s, 5, 3, order), 1);
    assert_int_equal(order[0], 3);
    assert_int_equal(s[1].state, S_STAGED);
}

static void test_grant_at_most_concurrency(void **state)
{
    (void)state;
    enum { N = 12 };
    struct slot s[N];
    for (int i = 0; i < N; i++)
        staged(&s[i], 100 - i); /* the last is the oldest */
    int order[N];
    assert_int_equal(grant_all(s, N, 4, order), 4);
    for (int k = 0; k < 4; k++)
        assert_int_equal(order[k], N - 1 - k);
    assert_int_equal(eng_device_slots_used(s, N), 4);
    assert_null(eng_admit_next(s, N, 4));
    /* every slot busy: nothing staged is granted */
    assert_int_equal(grant_all(s, N, 4, order), 0);
}

static void test_grant_none_staged(void **state)
{
    (void)state;
    struct slot s[3];
    running(&s[0], 1);
    slot_clear(&s[1]);
    slot_clear(&s[2]);
    assert_null(eng_admit_next(s, 3, 4));
    assert_int_equal(eng_device_slots_used(s, 3), 1);
}

/* A task keeps its device slot while its pair is killed and until it is
 * finished; one released or timed out before its grant holds none and is
 * granted none. A held result holds no slot (no task runs then). */
static void test_device_slots_through_release_and_timeout(void **state)
{
    (void)state;
    struct slot s[5];
    running(&s[0], 1);
    slot_set_state(&s[0], S_RELEASED);
    running(&s[1], 2);
    slot_set_state(&s[1], S_TIMED_OUT);
    staged(&s[2], 3);
    slot_set_state(&s[2], S_RELEASED);
    staged(&s[3], 4);
    slot_set_state(&s[3], S_TIMED_OUT);
    staged(&s[4], 5);
    assert_int_equal(eng_device_slots_used(s, 5), 2);
    assert_ptr_equal(eng_admit_next(s, 5, 3), &s[4]);
    assert_null(eng_admit_next(s, 5, 2));
    running(&s[0], 1);
    slot_set_state(&s[0], S_HELD);
    assert_int_equal(eng_device_slots_used(s, 5), 1);
}

/* ---- the spare pool ---------------------------------------------------- */

static void test_spare_pick_matching(void **state)
{
    (void)state;
    struct slot sp[4];
    for (int i = 0; i < 4; i++)
        slot_clear(&sp[i]);
    spare(&sp[1], 1, 1, 10); /* Triton's interpreter */
    assert_null(eng_spare_pick(sp, 4, 0, 1));
    assert_null(eng_spare_pick(sp, 4, 0, 0));
    assert_ptr_equal(eng_spare_pick(sp, 4, 1, 1), &sp[1]);
    spare(&sp[3], 0, 0, 20);
    assert_ptr_equal(eng_spare_pick(sp, 4, 0, 0), &sp[3]);
    assert_ptr_equal(eng_spare_pick(sp, 4, 1, 0), &sp[1]);
}

/* A spare that warmed the profiler is preferred for a task that profiles,
 * but one that did not still serves it; of equals the oldest. */
static void test_spare_pick_profiler_then_oldest(void **state)
{
    (void)state;
    struct slot sp[4];
    spare(&sp[0], 0, 0, 5);
    spare(&sp[1], 0, 1, 30);
    spare(&sp[2], 0, 1, 20);
    spare(&sp[3], 0, 0, 1);
    assert_ptr_equal(eng_spare_pick(sp, 4, 0, 1), &sp[2]);
    assert_ptr_equal(eng_spare_pick(sp, 4, 0, 0), &sp[3]);
    assert_ptr_equal(eng_spare_pick(sp, 2, 0, 0), &sp[0]);
    spare(&sp[1], 0, 0, 30);
    spare(&sp[2], 0, 0, 20);
    assert_ptr_equal(eng_spare_pick(sp, 3, 0, 1), &sp[0]);
}

static void test_spare_pick_skips_dead_and_taken(void **state)
{
    (void)state;
    struct slot sp[3];
    spare(&sp[0], 0, 1, 1);
    sp[0].judge.exited = 1;
    spare(&sp[1], 0, 1, 2);
    sp[1].cand.exited = 1;
    spare(&sp[2], 0, 1, 3);
    slot_set_state(&sp[2], S_RUNNING); /* taken by a task */
    assert_null(eng_spare_pick(sp, 3, 0, 1));
    spare(&sp[2], 0, 1, 3);
    assert_ptr_equal(eng_spare_pick(sp, 3, 0, 1), &sp[2]);
}

static void test_no_spare_without_zygote(void **state)
{
    (void)state;
    kg_engine *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->cfg.device = "cpu";
    spare(&e->spares[0], 0, 1, 1);
    json_t *task = json_pack("{s:s}", "backend", "cpu");
    assert_null(eng_take_spare(e, task)); /* fresh mode */
    json_decref(task);
    free(e);
}

static void test_spare_want_capped(void **state)
{
    (void)state;
    /* the queue plus idle_warm, at most the cap */
    assert_int_equal(eng_spare_want(0, 0, 7, -1), 0);
    assert_int_equal(eng_spare_want(3, 0, 7, -1), 3);
    assert_int_equal(eng_spare_want(3, 2, 7, -1), 5);
    assert_int_equal(eng_spare_want(30, 0, 7, -1), 7);
    assert_int_equal(eng_spare_want(0, 12, 7, -1), 7);
    /* memory's cap when lower */
    assert_int_equal(eng_spare_want(30, 0, 7, 3), 3);
    assert_int_equal(eng_spare_want(2, 0, 7, 3), 2);
    assert_int_equal(eng_spare_want(30, 0, 7, 9), 7);
    assert_int_equal(eng_spare_want(30, 0, 7, 0), 0);
}

static void test_spare_cap_follows_profiling(void **state)
{
    (void)state;
    kg_engine *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->prewarm = 12;
    e->prewarm_noprof = 7;
    e->last_prof = 1;
    assert_int_equal(eng_spare_cap(e), 12);
    e->last_prof = 0;
    assert_int_equal(eng_spare_cap(e), 7);
    e->prewarm_noprof = 0; /* no separate default: prewarm */
    assert_int_equal(eng_spare_cap(e), 12);
    free(e);
}

/* Below the floor two fewer (at least one); with twice the floor free one
 * more, and no cap once back at the default. */
static void test_spare_mem_cap(void **state)
{
    (void)state;
    double total = 1000, floor = 0.25;
    assert_int_equal(eng_spare_mem_cap(-1, 7, 100, total, floor), 5);
    assert_int_equal(eng_spare_mem_cap(5, 7, 100, total, floor), 3);
    assert_int_equal(eng_spare_mem_cap(3, 7, 100, total, floor), 1);
    assert_int_equal(eng_spare_mem_cap(2, 7, 100, total, floor), 1);
    assert_int_equal(eng_spare_mem_cap(1, 7, 100, total, floor), 1);
    assert_int_equal(eng_spare_mem_cap(-1, 1, 100, total, floor), -1);
    /* between the floor and twice it: unchanged */
    assert_int_equal(eng_spare_mem_cap(3, 7, 300, total, floor), 3);
    assert_int_equal(eng_spare_mem_cap(-1, 7, 300, total, floor), -1);
    /* recovering */
    assert_int_equal(eng_spare_mem_cap(3, 7, 600, total, floor), 4);
    assert_int_equal(eng_spare_mem_cap(5, 7, 600, total, floor), 6);
    assert_int_equal(eng_spare_mem_cap(6, 7, 600, total, floor), -1);
    assert_int_equal(eng_spare_mem_cap(-1, 7, 600, total, floor), -1);
}

/* ---- admission by memory (a fake device of 100 units) ------------------ */

static void test_mem_admit_fits_waits_or_never(void **st)
{
    (void)st;
    const double total = 100, share = MEM_SHARE; /* 90 usable */
    /* unknown need or unknown device: no gate */
    assert_int_equal(eng_mem_admit(0, 0, 80, 3, total, share), ADMIT_GO);
    assert_int_equal(eng_mem_admit(50, 10, 80, 3, 0, share), ADMIT_GO);
    /* fits beside the others, or not yet */
    assert_int_equal(eng_mem_admit(30, 10, 60, 2, total, share), ADMIT_GO);
    assert_int_equal(eng_mem_admit(31, 10, 60, 2, total, share), ADMIT_WAIT);
    /* alone it always starts when it fits the device at all */
    assert_int_equal(eng_mem_admit(89, 30, 0, 0, total, share), ADMIT_GO);
    /* unknown-need tasks running hold nothing admitted: it still waits for
     * what the known ones hold */
    assert_int_equal(eng_mem_admit(60, 20, 40, 3, total, share), ADMIT_WAIT);
    /* its bound above the usable memory but its footprint within: it runs
     * alone (an honest one holds less than the bound), never beside others */
    assert_int_equal(eng_mem_admit(120, 40, 0, 0, total, share), ADMIT_GO);
    assert_int_equal(eng_mem_admit(120, 40, 5, 1, total, share), ADMIT_WAIT);
    /* its footprint alone more than the usable memory: never, whatever
     * runs */
    assert_int_equal(eng_mem_admit(273, 91, 0, 0, total, share), ADMIT_NEVER);
    assert_int_equal(eng_mem_admit(273, 91, 50, 1, total, share), ADMIT_NEVER);
}

static void test_mem_held_sums_active_tasks(void **st)
{
    (void)st;
    struct slot slots[4];
    for (int i = 0; i < 4; i++)
        slot_clear(&slots[i]);
    running(&slots[0], 1);
    slots[0].need = 30;
    staged(&slots[1], 2); /* staged: it will run, its memory is counted */
    slots[1].need = 20;
    slots[2].need = 99; /* free: counts nothing */
    running(&slots[3], 3); /* unknown need */
    int n = -1;
    assert_true(eng_mem_held(slots, 4, &n) == 50);
    assert_int_equal(n, 3);
}

static json_t *task_of(const char *ref)
{
    json_t *t = json_object();
    json_object_set_new(t, "reference_code", json_string(ref));
    return t;
}

/* A result carrying the judge's memory figures (bytes). */
static json_t *result_with(double footprint, double total)
{
    json_t *r = json_object();
    json_t *m = json_object();
    if (footprint >= 0)
        json_object_set_new(m, "footprint_bytes", json_real(footprint));
    if (total >= 0)
        json_object_set_new(m, "device_total_bytes", json_real(total));
    json_object_set_new(r, "memory", m);
    return r;
}

static void test_footprints_remembered_per_problem(void **st)
{
    (void)st;
    static kg_engine e; /* large: not on the stack */
    memset(&e, 0, sizeof e);
    struct slot sl;
    slot_clear(&sl);
    sl.task = task_of("class Model: a");
    json_t *other = task_of("class Model: b");
    assert_true(eng_task_need(&e, sl.task) == 0); /* never seen: ungated */
    json_t *r = result_with(10, 100);
    eng_note_footprint(&e, &sl, r);
    json_decref(r);
    assert_true(e.dev_total == 100);
    assert_true(eng_task_need(&e, sl.task) == MEM_FACTOR * 10);
    assert_true(eng_task_need(&e, other) == 0);
    /* the largest seen stays; a result without figures changes nothing */
    r = result_with(4, -1);
    eng_note_footprint(&e, &sl, r);
    json_decref(r);
    r = result_with(-1, -1);
    eng_note_footprint(&e, &sl, r);
    json_decref(r);
    assert_true(eng_task_need(&e, sl.task) == MEM_FACTOR * 10);
    assert_true(e.dev_total == 100);
    /* a problem of 40 on this device of 100: alone only (a bound of
     * 120 > 90, a footprint of 40 <= 90); of 95: never */
    r = result_with(40, -1);
    eng_note_footprint(&e, &sl, r);
    json_decref(r);
    assert_int_equal(eng_mem_admit(eng_task_need(&e, sl.task),
                                   eng_task_footprint(&e, sl.task), 0, 0,
                                   e.dev_total, MEM_SHARE),
                     ADMIT_GO);
    assert_int_equal(eng_mem_admit(eng_task_need(&e, sl.task),
                                   eng_task_footprint(&e, sl.task), 1, 1,
                                   e.dev_total, MEM_SHARE),
                     ADMIT_WAIT);
    r = result_with(95, -1);
    eng_note_footprint(&e, &sl, r);
    json_decref(r);
    assert_int_equal(eng_mem_admit(eng_task_need(&e, sl.task),
                                   eng_task_footprint(&e, sl.task), 0, 0,
                                   e.dev_total, MEM_SHARE),
                     ADMIT_NEVER);
    assert_int_equal(e.nfoot, 1);
    json_decref(sl.task);
    json_decref(other);
}

/* A problem not seen yet, on a device of known size, is admitted as an
 * equal share of the usable memory among the engine's slots: beside a
 * known task holding most of it, it waits; slots full of such tasks fit. */
static void test_first_task_needs_an_equal_share(void **st)
{
    (void)st;
    static kg_engine e; /* large: not on the stack */
    memset(&e, 0, sizeof e);
    e.nslots = 4; /* concurrency 3 + stage 1, say */
    json_t *fresh = task_of("class Model: new");
    assert_true(eng_task_need(&e, fresh) == 0); /* device size unknown */
    e.dev_total = 100;
    assert_true(eng_task_need(&e, fresh) == MEM_SHARE * 100 / 4);
    assert_true(eng_task_footprint(&e, fresh) == 0);
    /* a known problem holding 75 of the 90 usable: the newcomer waits */
    assert_int_equal(eng_mem_admit(eng_task_need(&e, fresh), eng_task_footprint(&e, fresh), 75, 1,
                                   e.dev_total, MEM_SHARE),
                     ADMIT_WAIT);
    /* once its footprint is learnt, the problem's own need counts */
    kg_engine_note_footprint(&e, "class Model: new", 2, 0);
    assert_true(eng_task_footprint(&e, fresh) == 2);
    assert_true(eng_task_need(&e, fresh) == MEM_FACTOR * 2);
    assert_int_equal(eng_mem_admit(eng_task_need(&e, fresh), eng_task_footprint(&e, fresh), 75, 1,
                                   e.dev_total, MEM_SHARE),
                     ADMIT_GO);
    json_decref(fresh);
}

/* Every slot taken by a first task fits, whatever rounding the division
 * leaves; one share more does not. */
static void test_equal_shares_fill_the_slots(void **st)
{
    (void)st;
    const double totals[] = {100, 150754820096.0, 1e9 / 3, 7};
    for (size_t k = 0; k < sizeof totals / sizeof *totals; k++)
        for (int n = 1; n <= MAX_SLOTS; n++) {
            double share = eng_equal_share(totals[k], MEM_SHARE, n);
            assert_true(share > 0);
            double held = 0;
            for (int i = 0; i < n; i++) {
                assert_int_equal(
                    eng_mem_admit(share, 0, held, i, totals[k], MEM_SHARE),
                    ADMIT_GO);
                held += share;
            }
            assert_int_equal(
                eng_mem_admit(share, 0, held, n, totals[k], MEM_SHARE),
                ADMIT_WAIT);
        }
    assert_true(eng_equal_share(0, MEM_SHARE, 4) == 0);
    assert_true(eng_equal_share(100, MEM_SHARE, 0) == 0);
}

/* The judge's footprint note (frame.h), read at the front of its result
 * pipe: the problem's footprint is known and the running task holds
 * MEM_FACTOR x of it from then on; the frame behind it stays whole; a
 * note that has not all arrived waits; a bad one ends the pipe. */
static void put_note(struct slot *sl, const char *json, size_t cut)
{
    char head[16] = {'K', 'G', 'Y', 'M', 'N', 'O', 'T', 'E'};
    size_t n = strlen(json);
    for (int i = 0; i < 8; i++)
        head[8 + i] = (char)((uint64_t)n >> (56 - 8 * i));
    char all[256];
    memcpy(all, head, 16);
    memcpy(all + 16, json, n);
    assert_int_equal(kg_dynbuf_put(&sl->res.d, all, cut ? cut : 16 + n), 0);
}

/* A fake engine of 4 slots (zeroed, static: it is large) and a task of
 * this reference running in sl, its results read from no pipe: the
 * notes tests feed its buffer by hand. */
static kg_engine *noted(struct slot *sl, const char *ref)
{
    static kg_engine e;
    memset(&e, 0, sizeof e);
    e.nslots = 4;
    running(sl, 1);
    sl->res_fd = -1;
    sl->task = task_of(ref);
    return &e;
}

static void test_footprint_note_raises_the_need_at_once(void **st)
{
    (void)st;
    struct slot sl;
    kg_engine *e = noted(&sl, "class Model: noted");
    sl.need = 10; /* admitted as a share, before anything was known */
    const char *note = "{\"footprint_bytes\": 30, \"device_total_bytes\": 400}";
    put_note(&sl, note, 20); /* part of it: nothing yet */
    eng_take_notes(e, &sl);
    assert_true(eng_task_footprint(e, sl.task) == 0);
    assert_int_equal(sl.res.d.len, 20);
    eng_buf_free(&sl.res);
    put_note(&sl, note, 0);
    assert_int_equal(kg_dynbuf_put(&sl.res.d, "KGYMRES1", 8), 0);
    eng_take_notes(e, &sl);
    assert_true(eng_task_footprint(e, sl.task) == 30);
    assert_true(e->dev_total == 400);
    assert_true(sl.need == MEM_FACTOR * 30);
    assert_int_equal(sl.res.d.len, 8); /* the frame's bytes, untouched */
    assert_memory_equal(sl.res.d.p, "KGYMRES1", 8);
    /* a smaller footprint later never lowers what it holds */
    eng_buf_free(&sl.res);
    put_note(&sl, "{\"footprint_bytes\": 5}", 0);
    eng_take_notes(e, &sl);
    assert_true(sl.need == MEM_FACTOR * 30);
    /* a bad note: the pipe is dropped, its bytes too */
    put_note(&sl, "[1, 2]", 0);
    eng_take_notes(e, &sl);
    assert_int_equal(sl.res.d.len, 0);
    eng_buf_free(&sl.res);
    json_decref(sl.task);
}

/* A judge's timing notes: its pair's main threads run at TIMING_NICE while
 * it times alone, and at 0 after (root only: CAP_SYS_NICE). A sleeper dies
 * with the test and holds none of its output open, so a failed assertion
 * ends the run at once instead of leaving it waiting on the pipe. */
static pid_t sleeper(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        pause();
        _exit(0);
    }
    return pid;
}

static void test_timing_note_raises_the_pairs_priority(void **st)
{
    (void)st;
    if (geteuid() != 0)
        skip();
    struct slot sl;
    kg_engine *e = noted(&sl, "class Model: timed");
    sl.judge.pid = sleeper();
    sl.cand.pid = sleeper();
    pid_t other = sleeper(); /* another task's: never touched */
    if (setpriority(PRIO_PROCESS, (id_t)other, -1) != 0) {
        /* root without CAP_SYS_NICE (a container): nothing to test */
        pid_t all[3] = {sl.judge.pid, sl.cand.pid, other};
        for (int i = 0; i < 3; i++) {
            kill(all[i], SIGKILL);
            waitpid(all[i], NULL, 0);
        }
        json_decref(sl.task);
        skip();
    }
    setpriority(PRIO_PROCESS, (id_t)other, 0);
    put_note(&sl, "{\"timing\": true}", 0);
    eng_take_notes(e, &sl);
    errno = 0;
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)sl.judge.pid), TIMING_NICE);
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)sl.cand.pid), TIMING_NICE);
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)other), 0);
    put_note(&sl, "{\"timing\": false}", 0);
    eng_take_notes(e, &sl);
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)sl.judge.pid), 0);
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)sl.cand.pid), 0);
    assert_int_equal(sl.res.d.len, 0);
    pid_t all[3] = {sl.judge.pid, sl.cand.pid, other};
    for (int i = 0; i < 3; i++) {
        kill(all[i], SIGKILL);
        waitpid(all[i], NULL, 0);
    }
    eng_buf_free(&sl.res);
    json_decref(sl.task);
}

/* A judge's estimate (its set-up's note) sizes its problem until the
 * measured footprint replaces it, whatever the two sizes; a later
 * estimate never replaces a measure. Until a task has told its size, a
 * task of another unknown problem waits; one of a known problem does not. */
static void test_estimates_and_the_unknown_hold(void **st)
{
    (void)st;
    struct slot sl;
    kg_engine *e = noted(&sl, "class Model: guessed");
    e->slots[0] = sl; /* active, not sized */
    assert_true(eng_unsized_active(e));
    assert_true(eng_hold_unknown(e, 0));
    assert_false(eng_hold_unknown(e, 5)); /* a known problem starts */
    put_note(&e->slots[0], "{\"footprint_bytes\": 60, \"estimate\": true}", 0);
    eng_take_notes(e, &e->slots[0]);
    assert_true(e->slots[0].sized);
    assert_false(eng_unsized_active(e));
    assert_false(eng_hold_unknown(e, 0));
    assert_true(eng_task_footprint(e, sl.task) == 60);
    assert_true(e->slots[0].need == MEM_FACTOR * 60);
    /* measured smaller: it replaces the estimate */
    put_note(&e->slots[0], "{\"footprint_bytes\": 40}", 0);
    eng_take_notes(e, &e->slots[0]);
    assert_true(eng_task_footprint(e, sl.task) == 40);
    /* a later estimate, larger or not, changes nothing measured */
    put_note(&e->slots[0], "{\"footprint_bytes\": 90, \"estimate\": true}", 0);
    eng_take_notes(e, &e->slots[0]);
    assert_true(eng_task_footprint(e, sl.task) == 40);
    /* a null estimate (get_inputs() could not run on meta) still tells */
    e->slots[0].sized = 0;
    put_note(&e->slots[0], "{\"footprint_bytes\": null, \"estimate\": true}", 0);
    eng_take_notes(e, &e->slots[0]);
    assert_true(e->slots[0].sized);
    eng_buf_free(&e->slots[0].res);
    json_decref(sl.task);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transitions_allowed),
        cmocka_unit_test(test_footprint_note_raises_the_need_at_once),
        cmocka_unit_test(test_timing_note_raises_the_pairs_priority),
        cmocka_unit_test(test_estimates_and_the_unknown_hold),
        cmocka_unit_test(test_transitions_refused),
        cmocka_unit_test(test_forbidden_transition_aborts),
        cmocka_unit_test(test_running_takes_a_device_slot_until_cleared),
        cmocka_unit_test(test_slot_move_leaves_the_source_free),
        cmocka_unit_test(test_active_states),
        cmocka_unit_test(test_grant_oldest_staged_first),
        cmocka_unit_test(test_grant_at_most_concurrency),
        cmocka_unit_test(test_grant_none_staged),
        cmocka_unit_test(test_device_slots_through_release_and_timeout),
        cmocka_unit_test(test_spare_pick_matching),
        cmocka_unit_test(test_spare_pick_profiler_then_oldest),
        cmocka_unit_test(test_spare_pick_skips_dead_and_taken),
        cmocka_unit_test(test_no_spare_without_zygote),
        cmocka_unit_test(test_spare_want_capped),
        cmocka_unit_test(test_spare_cap_follows_profiling),
        cmocka_unit_test(test_spare_mem_cap),
        cmocka_unit_test(test_mem_admit_fits_waits_or_never),
        cmocka_unit_test(test_mem_held_sums_active_tasks),
        cmocka_unit_test(test_footprints_remembered_per_problem),
        cmocka_unit_test(test_first_task_needs_an_equal_share),
        cmocka_unit_test(test_equal_shares_fill_the_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
