/* engine_rerun.c - a task whose judge, reference or candidate ran out of
 * device memory while other pairs shared the device is not reported: it
 * runs once more, alone (docs/worker.md, "Out of memory beside others"). Which results
 * qualify, the company each task had, the gate that keeps the device for
 * the rerun, and what its result says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/request.h"
#include "worker/engine_impl.h"

#define GIB 1073741824.0

static const char *str_of(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Text a device allocation failure leaves: torch's "CUDA out of memory",
 * the CUDA runtime's "out of memory", torch.OutOfMemoryError, and the CUDA
 * libraries' *_ALLOC_FAILED (cuBLAS, cuDNN workspaces). A host allocation
 * failure (MemoryError, "can't allocate memory") is not one. */
static int says_device_oom(const char *s)
{
    return strstr(s, "out of memory") || strstr(s, "OutOfMemoryError") ||
           strstr(s, "_ALLOC_FAILED");
}

/* r is the judge's own failure or the reference's (infra_error with
 * INFRA_ERROR or REFERENCE_ERROR); a candidate's failure, out of memory
 * included (runtime_error), is its verdict and never this. */
static int judges_own(const json_t *r)
{
    const char *code = str_of(r, "error_code");
    return !strcmp(str_of(r, "verdict"), "infra_error") &&
           (!strcmp(code, "INFRA_ERROR") || !strcmp(code, "REFERENCE_ERROR"));
}

/* r's error (its message, error.message or error.type) says the device ran
 * out of memory. */
static int error_says_oom(const json_t *r)
{
    const json_t *err = json_object_get(r, "error");
    return says_device_oom(str_of(r, "error_message")) ||
           says_device_oom(str_of(err, "message")) ||
           says_device_oom(str_of(err, "type"));
}

int eng_oom_not_candidates(const json_t *r)
{
    if (!judges_own(r))
        return 0;
    return error_says_oom(r);
}

/* The candidate's own out of memory: runtime_error OUT_OF_MEMORY (torch's
 * error) or CUDA_ERROR saying so (the runtime's). Its claim, which earns
 * nothing but one run alone, whose verdict stands. */
int eng_oom_candidates(const json_t *r)
{
    const char *code = str_of(r, "error_code");
    if (strcmp(str_of(r, "verdict"), "runtime_error") ||
        (strcmp(code, "OUT_OF_MEMORY") && strcmp(code, "CUDA_ERROR")))
        return 0;
    return error_says_oom(r);
}

int eng_rerun_wanted(const json_t *r, int others, int reran)
{
    return !reran && others > 0 &&
           (eng_oom_not_candidates(r) || eng_oom_candidates(r));
}

/* Pairs on the device now: tasks active (running, staged, being killed),
 * warm spares, and pairs whose result is out but which are still exiting. */
static int pairs_on_device(const kg_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->nslots; i++)
        n += slot_active(&e->slots[i]);
    for (int i = 0; i < MAX_SPARES; i++)
        n += e->spares[i].state == S_SPARE;
    for (int i = 0; i < MAX_DYING; i++)
        n += e->dying[i].state == S_DYING;
    return n;
}

void eng_note_company(kg_engine *e)
{
    int others = pairs_on_device(e) - 1;
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (slot_active(sl) && others > sl->company)
            sl->company = others;
    }
}

int eng_alone_gate(const kg_engine *e)
{
    int active = 0, dying = 0;
    for (int i = 0; i < e->nslots; i++) {
        const struct slot *sl = &e->slots[i];
        if (!slot_active(sl))
            continue;
        if (sl->alone)
            return GATE_SHUT; /* a rerun runs: nothing starts beside it */
        active++;
    }
    if (!e->head || !e->head->alone)
        return GATE_OPEN;
    for (int i = 0; i < MAX_DYING; i++)
        dying += e->dying[i].state == S_DYING;
    return active || dying ? GATE_SHUT : GATE_LONE;
}

/* A copy of task with a new secret seed (kg_request_reseed), or NULL. */
static json_t *reseeded(const json_t *task)
{
    json_t *t = json_deep_copy(task);
    if (t && kg_request_reseed(t)) {
        json_decref(t);
        return NULL;
    }
    return t;
}

/* The task of sl queued again, first in line, to run alone, on inputs of a
 * new seed; its rerun note (checks.rerun) says why and what the first run
 * reported. 0 when it could not be queued (out of memory): the first
 * result goes out instead. */
static int queue_alone(kg_engine *e, struct slot *sl, const json_t *r)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return 0;
    json_t *task = reseeded(sl->task);
    if (!task) {
        free(p);
        return 0;
    }
    char reason[128];
    snprintf(reason, sizeof reason,
             "device out of memory beside %d other pair%s on the device",
             sl->company, sl->company == 1 ? "" : "s");
    p->rerun = json_pack(
        "{s:s, s:i, s:{s:s, s:s, s:s}}", "reason", reason, "others",
        sl->company, "first_error", "verdict", str_of(r, "verdict"),
        "error_code", str_of(r, "error_code"), "message",
        str_of(r, "error_message"));
    if (!p->rerun) {
        json_decref(task);
        free(p);
        return 0;
    }
    p->task = task;
    p->user = sl->user;
    p->t_submit = sl->t_submit;
    p->alone = 1;
    p->next = e->head;
    e->head = p;
    if (!e->tail)
        e->tail = p;
    e->npending++;
    return 1;
}

/* Appends text to r's error message (top level and error.message). */
static void add_to_message(json_t *r, const char *text)
{
    char msg[2048];
    snprintf(msg, sizeof msg, "%s%s", str_of(r, "error_message"), text);
    json_object_set_new(r, "error_message", json_string(msg));
    json_t *err = json_object_get(r, "error");
    if (json_is_object(err))
        json_object_set_new(err, "message", json_string(msg));
}

/* An out of memory of the judge's or the reference's that is reported as
 * it is: its message says how much company the task had and names the
 * sizes the engine knows (the problem's footprint, the device's). */
static void name_sizes(const kg_engine *e, const struct slot *sl, json_t *r)
{
    char fp[160] = "", dev[64] = "", text[400];
    double foot = eng_task_footprint(e, sl->task);
    if (foot > 0)
        snprintf(fp, sizeof fp,
                 "; the problem's footprint %.1f GiB (about %.1f GiB with "
                 "judge and candidate)",
                 foot / GIB, MEM_FACTOR * foot / GIB);
    if (e->dev_total > 0)
        snprintf(dev, sizeof dev, "; the device %.1f GiB",
                 e->dev_total / GIB);
    if (sl->company > 0)
        snprintf(text, sizeof text,
                 " [beside %d other pair%s on the device%s%s]", sl->company,
                 sl->company == 1 ? "" : "s", fp, dev);
    else
        snprintf(text, sizeof text, " [it ran alone on the device%s%s]", fp,
                 dev);
    add_to_message(r, text);
}

int eng_rerun_take(kg_engine *e, struct slot *sl, json_t *r)
{
    if (eng_rerun_wanted(r, sl->company, sl->alone) && queue_alone(e, sl, r)) {
        kg_warn("task %s: out of device memory beside %d other pair(s): "
                "running it again, alone",
                str_of(sl->task, "task_id"), sl->company);
        return 1;
    }
    if (eng_oom_not_candidates(r))
        name_sizes(e, sl, r);
    return 0;
}

void eng_rerun_mark(const struct slot *sl, json_t *r)
{
    if (!sl->rerun)
        return;
    json_t *note = json_deep_copy(sl->rerun);
    json_object_set_new(note, "alone", json_boolean(sl->company == 0));
    json_t *checks = json_object_get(r, "checks");
    if (!json_is_object(checks)) {
        checks = json_object();
        json_object_set_new(r, "checks", checks);
    }
    json_object_set_new(checks, "rerun", note);
    json_t *w = json_object_get(r, "warnings");
    if (!json_is_array(w)) {
        w = json_array();
        json_object_set_new(r, "warnings", w);
    }
    char text[512];
    snprintf(text, sizeof text,
             "rerun alone: the first run ran out of device memory beside "
             "%d other pair(s) (%s / %s); this is the "
             "result of the second run, alone on the device",
             (int)json_integer_value(json_object_get(sl->rerun, "others")),
             str_of(json_object_get(sl->rerun, "first_error"), "verdict"),
             str_of(json_object_get(sl->rerun, "first_error"), "error_code"));
    json_array_append_new(w, json_string(text));
}
