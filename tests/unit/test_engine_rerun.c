/* test_engine_rerun.c - a judge's or reference's out of memory beside other
 * pairs is run once more, alone (src/worker/engine_rerun.c), on plain
 * results and slots with no process behind them: which results qualify
 * (never a candidate's, never alone, never twice), the queue it goes back
 * to, the gate that keeps the device for it, and what its result says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "worker/engine_impl.h"

#define GIB 1073741824.0

/* A result as the judge would send it: verdict, code, message, type. */
static json_t *result(const char *verdict, const char *code, const char *msg,
                      const char *type)
{
    return json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:{}, s:[]}",
                     "verdict", verdict, "error_code", code, "error_message",
                     msg, "error", "phase", "correctness", "type", type,
                     "message", msg, "checks", "warnings");
}

static const char *REF_OOM =
    "the reference failed: forward() raised OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate 16.00 GiB";

static json_t *reference_oom(void)
{
    return result("infra_error", "REFERENCE_ERROR", REF_OOM,
                  "OutOfMemoryError");
}

/* A fake engine (zeroed, static: it is large) of nslots slots. */
static kg_engine *engine(int nslots)
{
    static kg_engine e;
    memset(&e, 0, sizeof e);
    e.nslots = nslots;
    e.cfg.device = "cpu";
    for (int i = 0; i < MAX_SLOTS; i++)
        slot_clear(&e.slots[i]);
    for (int i = 0; i < MAX_SPARES; i++)
        slot_clear(&e.spares[i]);
    for (int i = 0; i < MAX_DYING; i++)
        slot_clear(&e.dying[i]);
    return &e;
}

/* A running task of this reference code in sl. */
static void running(struct slot *sl, const char *ref)
{
    slot_clear(sl);
    slot_set_state(sl, S_RUNNING);
    sl->task = json_pack("{s:s, s:s}", "task_id", "t-1", "reference_code", ref);
}

static void drop(struct slot *sl)
{
    json_decref(sl->task);
    json_decref(sl->rerun);
    slot_clear(sl);
}

static void free_queue(kg_engine *e)
{
    while (e->head) {
        struct pending *p = e->head;
        e->head = p->next;
        json_decref(p->task);
        json_decref(p->rerun);
        free(p);
    }
    e->tail = NULL;
    e->npending = 0;
}

/* Whether a result of these fields is the judge's or reference's out of
 * memory. */
static int judges_or_references(const char *verdict, const char *code,
                                const char *msg, const char *type)
{
    json_t *r = result(verdict, code, msg, type);
    int yes = eng_oom_not_candidates(r);
    json_decref(r);
    return yes;
}

/* Whether a result of these fields, reported beside others others, is
 * rerun (its first run). */
static int wanted(const char *verdict, const char *code, const char *msg,
                  const char *type, int others)
{
    json_t *r = result(verdict, code, msg, type);
    int w = eng_rerun_wanted(r, others, 0);
    json_decref(r);
    return w;
}

static const char *msg_of(const json_t *r)
{
    return json_string_value(json_object_get(r, "error_message"));
}

/* ---- which results qualify --------------------------------------------- */

static void test_judge_and_reference_ooms_qualify(void **st)
{
    (void)st;
    json_t *r = reference_oom();
    assert_true(eng_oom_not_candidates(r));
    json_decref(r);
    /* the judge's own copies: INFRA_ERROR, by type or by text */
    assert_true(judges_or_references("infra_error", "INFRA_ERROR",
                                     "allocating the expected copy",
                                     "OutOfMemoryError"));
    assert_true(judges_or_references("infra_error", "INFRA_ERROR",
                                     "CUDA error: out of memory",
                                     "RuntimeError"));
    assert_true(judges_or_references("infra_error", "REFERENCE_ERROR",
                                     "CUBLAS_STATUS_ALLOC_FAILED when "
                                     "calling cublasCreate",
                                     "RuntimeError"));
}

static void test_a_candidates_oom_beside_others_qualifies_once(void **st)
{
    (void)st;
    /* the candidate's process found no room beside others (KernelBench's
     * 8 GiB reductions at concurrency 4): one run alone, whose verdict
     * stands; never when it ran alone, never twice */
    json_t *r = result("runtime_error", "OUT_OF_MEMORY",
                       "CUDA out of memory. Tried to allocate 2.00 GiB",
                       "OutOfMemoryError");
    assert_false(eng_oom_not_candidates(r));
    assert_true(eng_oom_candidates(r));
    assert_true(eng_rerun_wanted(r, 5, 0));
    assert_false(eng_rerun_wanted(r, 0, 0));
    assert_false(eng_rerun_wanted(r, 5, 1));
    json_decref(r);
    assert_true(wanted("runtime_error", "CUDA_ERROR",
                       "CUDA error: out of memory", "CUDA error: out of memory",
                       5));
    /* its other failures are its verdict, whatever their text says */
    assert_false(wanted("runtime_error", "FORWARD_EXCEPTION",
                        "out of memory, it says", "ValueError", 5));
    assert_false(wanted("runtime_error", "CUDA_ERROR",
                        "CUDA error: illegal memory access",
                        "CUDA error: an illegal memory access was encountered",
                        5));
    assert_false(wanted("runtime_error", "CHILD_DIED", "out of memory",
                        "ChildDied", 5));
    /* an infra_error of another kind (the engine's own spawn) */
    assert_false(wanted("infra_error", "SPAWN_FAILED", "fork: out of memory",
                        "x", 5));
}

static void test_other_failures_do_not_qualify(void **st)
{
    (void)st;
    /* the host's memory (MemoryError), a lock's timeout, a broken problem */
    assert_false(wanted("infra_error", "REFERENCE_ERROR",
                        "the reference failed: get_inputs() raised "
                        "MemoryError: can't allocate memory",
                        "MemoryError", 3));
    assert_false(wanted("infra_error", "INFRA_ERROR",
                        "the device lock timed out", "LockTimeout", 3));
    assert_false(wanted("problem_error", "PROBLEM_ERROR", "CUDA out of memory",
                        "x", 3));
    assert_false(wanted("pass", "", "", "", 3));
}

/* Only beside others, and only once. */
static void test_rerun_only_beside_others_and_once(void **st)
{
    (void)st;
    json_t *r = reference_oom();
    assert_true(eng_rerun_wanted(r, 1, 0));
    assert_true(eng_rerun_wanted(r, 7, 0));
    assert_false(eng_rerun_wanted(r, 0, 0)); /* it was alone */
    assert_false(eng_rerun_wanted(r, 7, 1)); /* a rerun already */
    assert_false(eng_rerun_wanted(r, 0, 1));
    json_decref(r);
}

/* ---- the rerun through the queue --------------------------------------- */

/* Taken: not handed out, first in line to run alone, with its note; the
 * rerun that runs out again is reported, marked, named with its sizes. */
static void test_taken_then_reported_once(void **st)
{
    (void)st;
    kg_engine *e = engine(4);
    json_t *other = json_object();
    assert_int_equal(kg_engine_submit(e, other, (void *)2, NULL), 0);
    json_decref(other);
    struct slot *sl = &e->slots[0];
    running(sl, "class Model: big");
    sl->user = (void *)1;
    sl->t_submit = 5;
    sl->company = 3;
    json_t *r = reference_oom();
    assert_int_equal(eng_rerun_take(e, sl, r), 1);
    assert_string_equal(msg_of(r), REF_OOM); /* left as it was */
    json_decref(r);
    /* first in line, ahead of what was queued */
    assert_int_equal(e->npending, 2);
    struct pending *p = e->head;
    assert_true(p->alone);
    /* the same task on inputs of a new seed (kg_request_reseed) */
    assert_ptr_not_equal(p->task, sl->task);
    json_t *seed = json_object_get(p->task, "seed");
    assert_true(json_is_integer(seed));
    assert_false(json_equal(seed, json_object_get(sl->task, "seed")));
    json_t *a = json_deep_copy(p->task), *b = json_deep_copy(sl->task);
    json_object_del(a, "seed");
    json_object_del(b, "seed");
    assert_true(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    assert_ptr_equal(p->user, (void *)1);
    assert_true(p->t_submit == 5);
    assert_ptr_equal(p->next->user, (void *)2);
    assert_ptr_equal(e->tail, p->next);
    const json_t *note = p->rerun;
    assert_non_null(strstr(json_string_value(json_object_get(note, "reason")),
                           "beside 3 other pairs"));
    assert_int_equal(json_integer_value(json_object_get(note, "others")), 3);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(note, "first_error"), "message")),
                        REF_OOM);
    /* the rerun: the slot gets the queued task as eng_start_task gives it */
    drop(sl);
    e->head = p->next;
    e->npending--;
    slot_clear(sl);
    slot_set_state(sl, S_RUNNING);
    sl->task = p->task;
    sl->alone = p->alone;
    sl->rerun = p->rerun;
    free(p);
    /* it runs out again, even with company (a gate that failed): reported */
    sl->company = 2;
    kg_engine_note_footprint(e, "class Model: big", 16 * GIB, 100 * GIB);
    r = reference_oom();
    assert_int_equal(eng_rerun_take(e, sl, r), 0);
    assert_int_equal(e->npending, 1);
    assert_non_null(strstr(msg_of(r), "16.0 GiB"));
    eng_rerun_mark(sl, r);
    const json_t *rr = json_object_get(json_object_get(r, "checks"), "rerun");
    assert_non_null(rr);
    assert_int_equal(json_integer_value(json_object_get(rr, "others")), 3);
    assert_false(json_is_true(json_object_get(rr, "alone")));
    const json_t *w = json_object_get(r, "warnings");
    assert_int_equal(json_array_size(w), 1);
    assert_non_null(
        strstr(json_string_value(json_array_get(w, 0)), "rerun alone"));
    json_decref(r);
    drop(sl);
    free_queue(e);
}

/* A candidate's out of memory beside others is run again alone, its first
 * error in the rerun note; alone, it goes out as it is, sizes not added. */
static void test_candidates_oom_is_taken_beside_others_only(void **st)
{
    (void)st;
    kg_engine *e = engine(2);
    struct slot *sl = &e->slots[0];
    running(sl, "class Model: c");
    sl->company = 4;
    const char *m = "CUDA out of memory. Tried to allocate 2.00 GiB";
    json_t *r = result("runtime_error", "OUT_OF_MEMORY", m, "OutOfMemoryError");
    assert_int_equal(eng_rerun_take(e, sl, r), 1);
    assert_int_equal(e->npending, 1);
    assert_true(e->head->alone);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(e->head->rerun, "first_error"), "error_code")),
        "OUT_OF_MEMORY");
    json_decref(r);
    free_queue(e);
    sl->company = 0;
    r = result("runtime_error", "OUT_OF_MEMORY", m, "OutOfMemoryError");
    assert_int_equal(eng_rerun_take(e, sl, r), 0);
    assert_int_equal(e->npending, 0);
    assert_string_equal(msg_of(r), m);
    eng_rerun_mark(sl, r); /* not a rerun: nothing added */
    assert_int_equal(json_object_size(json_object_get(r, "checks")), 0);
    assert_int_equal(json_array_size(json_object_get(r, "warnings")), 0);
    json_decref(r);
    drop(sl);
}

/* Alone: reported as it is, its message naming the sizes it knows. */
static void test_alone_oom_names_its_sizes(void **st)
{
    (void)st;
    kg_engine *e = engine(1);
    struct slot *sl = &e->slots[0];
    running(sl, "class Model: alone");
    json_t *r = reference_oom();
    assert_int_equal(eng_rerun_take(e, sl, r), 0);
    assert_int_equal(e->npending, 0);
    assert_non_null(strstr(msg_of(r), "it ran alone on the device]"));
    assert_null(strstr(msg_of(r), "GiB]"));
    json_decref(r);
    kg_engine_note_footprint(e, "class Model: alone", 16 * GIB, 140 * GIB);
    r = reference_oom();
    assert_int_equal(eng_rerun_take(e, sl, r), 0);
    const char *m = msg_of(r);
    assert_non_null(strstr(m, "it ran alone on the device"));
    assert_non_null(strstr(m, "footprint 16.0 GiB (about 48.0 GiB"));
    assert_non_null(strstr(m, "the device 140.0 GiB"));
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(r, "error"), "message")),
                        m);
    json_decref(r);
    drop(sl);
}

/* ---- company and the gate ---------------------------------------------- */

static void test_company_counts_tasks_spares_and_exiting_pairs(void **st)
{
    (void)st;
    kg_engine *e = engine(4);
    running(&e->slots[0], "a");
    running(&e->slots[2], "b");
    slot_set_state(&e->spares[5], S_SPARE);
    slot_set_state(&e->dying[1], S_RUNNING);
    slot_set_state(&e->dying[1], S_RELEASED);
    slot_set_state(&e->dying[1], S_DYING);
    eng_note_company(e);
    assert_int_equal(e->slots[0].company, 3);
    assert_int_equal(e->slots[2].company, 3);
    assert_int_equal(e->slots[1].company, 0); /* free */
    /* the most seen stays */
    slot_clear(&e->spares[5]);
    slot_clear(&e->dying[1]);
    eng_note_company(e);
    assert_int_equal(e->slots[0].company, 3);
    /* a task alone */
    drop(&e->slots[2]);
    running(&e->slots[3], "c");
    drop(&e->slots[0]);
    eng_note_company(e);
    assert_int_equal(e->slots[3].company, 0);
    drop(&e->slots[3]);
}

static void queue_rerun(kg_engine *e)
{
    json_t *t = json_object();
    assert_int_equal(kg_engine_submit(e, t, NULL, NULL), 0);
    json_decref(t);
    e->head->alone = 1;
}

static void test_gate(void **st)
{
    (void)st;
    kg_engine *e = engine(4);
    assert_int_equal(eng_alone_gate(e), GATE_OPEN);
    /* tasks run and an ordinary task waits: as usual */
    running(&e->slots[1], "a");
    json_t *t = json_object();
    assert_int_equal(kg_engine_submit(e, t, NULL, NULL), 0);
    json_decref(t);
    assert_int_equal(eng_alone_gate(e), GATE_OPEN);
    free_queue(e);
    /* a rerun heads the queue: it waits for the task on the device ... */
    queue_rerun(e);
    assert_int_equal(eng_alone_gate(e), GATE_SHUT);
    /* ... then for the pair still exiting ... */
    slot_set_state(&e->slots[1], S_RELEASED);
    assert_int_equal(eng_alone_gate(e), GATE_SHUT);
    slot_move(&e->dying[0], &e->slots[1]);
    slot_set_state(&e->dying[0], S_DYING);
    assert_int_equal(eng_alone_gate(e), GATE_SHUT);
    drop(&e->dying[0]);
    /* ... a held result has no pair on the device: it may start */
    running(&e->slots[2], "h");
    slot_set_state(&e->slots[2], S_HELD);
    assert_int_equal(eng_alone_gate(e), GATE_LONE);
    drop(&e->slots[2]);
    assert_int_equal(eng_alone_gate(e), GATE_LONE);
    /* it runs: nothing starts beside it, queued or not */
    struct pending *p = e->head;
    e->head = e->tail = NULL;
    e->npending = 0;
    running(&e->slots[0], "r");
    e->slots[0].alone = 1;
    e->slots[0].rerun = p->rerun;
    json_decref(p->task);
    free(p);
    assert_int_equal(eng_alone_gate(e), GATE_SHUT);
    t = json_object();
    assert_int_equal(kg_engine_submit(e, t, NULL, NULL), 0);
    json_decref(t);
    assert_int_equal(eng_alone_gate(e), GATE_SHUT);
    /* done: the queue goes on */
    drop(&e->slots[0]);
    assert_int_equal(eng_alone_gate(e), GATE_OPEN);
    free_queue(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge_and_reference_ooms_qualify),
        cmocka_unit_test(test_a_candidates_oom_beside_others_qualifies_once),
        cmocka_unit_test(test_other_failures_do_not_qualify),
        cmocka_unit_test(test_rerun_only_beside_others_and_once),
        cmocka_unit_test(test_taken_then_reported_once),
        cmocka_unit_test(test_candidates_oom_is_taken_beside_others_only),
        cmocka_unit_test(test_alone_oom_names_its_sizes),
        cmocka_unit_test(test_company_counts_tasks_spares_and_exiting_pairs),
        cmocka_unit_test(test_gate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
