/* rollout_env.c - codes through `kgym serve` (rollout.h): POST
 * /evaluate/batch in batches, then POST /results/batch (a long poll)
 * for the results of every code at the server at once. Task ids are
 * "<run id>-<n>", so a batch sent again after a lost reply is answered
 * with the tasks already there (docs/api.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/rollout.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/results_poll.h"

#define BATCH 256
#define REQ_TIMEOUT_MS 60000L

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int ro_env_health(ro_run *r, kg_err *err)
{
    kg_client_resp resp;
    kg_err e = {{0}};
    int rc = kg_client_request(r->server, "GET", "/health", NULL, 10000,
                               &resp, &e);
    if (rc) {
        kg_client_resp_free(&resp);
        return kg_errf(err, KG_EUNAVAIL, "server unreachable: %s", e.msg);
    }
    long status = resp.status;
    kg_client_resp_free(&resp);
    if (status != 200)
        return kg_errf(err, KG_EUNAVAIL,
                       "server is not healthy: GET /health answered HTTP %ld",
                       status);
    /* /health needs no token: a client route that does (the status of a
       task that does not exist, 404 when the token is good) tells a
       missing or refused token before any policy call */
    rc = kg_client_request(r->server, "GET", "/status/kgym-token-check",
                           NULL, 10000, &resp, &e);
    if (rc) {
        kg_client_resp_free(&resp);
        return kg_errf(err, KG_EUNAVAIL, "server unreachable: %s", e.msg);
    }
    status = resp.status;
    const char *msg = json_string_value(
        json_object_get(json_object_get(resp.json, "error"), "message"));
    if (!msg)
        msg = json_string_value(json_object_get(resp.json, "error"));
    if (status == 401 || status == 403) {
        kg_errf(err, KG_EINVAL,
                "the kgym server refused the client token (HTTP %ld%s%s): "
                "give --token-file F or $KGYM_TOKEN_FILE, the file `kgym "
                "serve --token-file` reads",
                status, msg ? ": " : "",
                msg ? msg : "");
        kg_client_resp_free(&resp);
        return KG_EINVAL;
    }
    kg_client_resp_free(&resp);
    return 0;
}

/* The task of turn u of trajectory tr (new reference). */
static json_t *make_task(ro_run *r, const ro_traj *tr, ro_turn *u)
{
    const kg_problem *p = &r->ps.p[tr->problem];
    json_t *task = json_copy(r->o->fields);
    snprintf(u->task_id, sizeof u->task_id, "%s-%ld", r->run_id,
             r->task_seq++);
    json_object_set_new(task, "task_id", json_string(u->task_id));
    json_object_set_new(task, "reference_code", json_string(p->reference));
    json_object_set_new(task, "kernel_code", json_string(u->code));
    if (p->entry_point)
        json_object_set_new(task, "entry_point", json_string(p->entry_point));
    return task;
}

/* What the server said of one task of a batch. */
static void take_entry(ro_turn *u, const json_t *e)
{
    json_t *res = json_object_get(e, "result");
    if (json_object_get(e, "status_code")) {
        json_t *er = json_object_get(e, "error");
        const char *code = json_string_value(json_object_get(er, "code"));
        const char *msg = json_string_value(json_object_get(er, "message"));
        char why[300];
        snprintf(why, sizeof why, "the server refused the task: %s %s",
                 code ? code : "?", msg ? msg : "");
        u->error = strdup(why);
        u->task_id[0] = 0;
    } else if (json_is_object(res)) {
        u->result = json_incref(res);
    }
}

/* POSTs tasks (taken) for us[0..n); retries while the server is away. */
static int post_batch(ro_run *r, json_t *tasks, ro_turn **us, int n,
                      kg_err *err)
{
    json_t *body = json_pack("{s:o}", "tasks", tasks);
    double t0 = kg_now_ms();
    for (;;) {
        kg_client_resp resp;
        kg_err e = {{0}};
        int rc = kg_client_request(r->server, "POST", "/evaluate/batch", body,
                                   REQ_TIMEOUT_MS, &resp, &e);
        json_t *entries = json_object_get(resp.json, "tasks");
        if (rc == 0 && resp.status == 200 &&
            json_array_size(entries) == (size_t)n) {
            for (int i = 0; i < n; i++)
                take_entry(us[i], json_array_get(entries, i));
            kg_client_resp_free(&resp);
            json_decref(body);
            return 0;
        }
        char why[400];
        if (rc)
            snprintf(why, sizeof why, "%s", e.msg);
        else
            kg_client_error_text(&resp, why, sizeof why);
        int fatal = rc == 0 && resp.status >= 400 && resp.status < 500;
        kg_client_resp_free(&resp);
        if (fatal || (r->stop && *r->stop) ||
            kg_now_ms() - t0 > RO_AWAY_S * 1000.0) {
            json_decref(body);
            return kg_errf(err, fatal ? KG_EINVAL : KG_EUNAVAIL,
                           "POST /evaluate/batch: %s", why);
        }
        ro_progress_end(r);
        kg_warn("POST /evaluate/batch: %s (retrying)", why);
        sleep_ms(1000);
    }
}

/* One GET /results of u (a server without POST /results/batch): 1 when
 * it is finished (result or error), 0 when not yet, -1 when the server
 * did not answer. */
static int poll_one(ro_run *r, ro_turn *u)
{
    char path[128];
    snprintf(path, sizeof path, "/results/%s", u->task_id);
    kg_client_resp resp;
    kg_err e = {{0}};
    int rc = kg_client_request(r->server, "GET", path, NULL, REQ_TIMEOUT_MS,
                               &resp, &e);
    int done = 0;
    if (rc || resp.status >= 500) {
        done = -1;
    } else if (resp.status == 200 && json_is_object(resp.json)) {
        u->result = json_incref(resp.json);
        done = 1;
    } else if (resp.status != 202) {
        char why[400];
        u->error = strdup(kg_client_error_text(&resp, why, sizeof why));
        done = 1;
    }
    kg_client_resp_free(&resp);
    return done;
}

/* Counts a finished evaluation for the progress line. */
static void count(ro_run *r, const ro_turn *u)
{
    const char *v = json_string_value(json_object_get(u->result, "verdict"));
    r->st.evals_done++;
    if (v && !strcmp(v, "pass"))
        r->st.pass++;
    if (v && !strcmp(v, "hacked"))
        r->st.hacked++;
}

int ro_env_submit(ro_run *r, ro_traj **ts, int m, kg_err *err)
{
    ro_turn *us[BATCH];
    int rc = 0;
    for (int b = 0; rc == 0 && b < m; b += BATCH) {
        int k = m - b < BATCH ? m - b : BATCH;
        json_t *tasks = json_array();
        for (int i = 0; i < k; i++) {
            us[i] = &ts[b + i]->turns[ts[b + i]->t];
            json_array_append_new(tasks, make_task(r, ts[b + i], us[i]));
        }
        rc = post_batch(r, tasks, us, k, err);
        for (int i = 0; rc == 0 && i < k; i++)
            if (us[i]->result)
                count(r, us[i]);
    }
    return rc;
}

/* One POST /results/batch for us[0..n) (n <= KG_RESULTS_MAX_IDS):
 * how many finished (result or error set), or -1 when the server did not
 * answer. */
static int poll_batch(ro_run *r, ro_turn **us, int n, double wait_s)
{
    const char **ids = calloc((size_t)n, sizeof *ids);
    json_t **res = calloc((size_t)n, sizeof *res);
    char *unknown = calloc((size_t)n, 1);
    kg_err e = {{0}};
    int rc = ids && res && unknown ? 0 : KG_ENOMEM, done = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        ids[i] = us[i]->task_id;
    if (rc == 0)
        rc = kg_results_poll(r->server, ids, (size_t)n, wait_s, REQ_TIMEOUT_MS,
                             res, unknown, &e);
    if (rc == KG_ENOTFOUND) {
        /* a server from before POST /results/batch (GET /results/{id}
           only): ask for each task again, one by one */
        kg_info("the server has no POST /results/batch: asking for each "
                "result on its own");
        r->poll_one_by_one = 1;
        rc = 0;
    } else if (rc == KG_EUNAVAIL || rc == KG_ENOMEM) {
        done = -1; /* asked again (the server counts as away) */
    }
    for (int i = 0; done >= 0 && i < n; i++) {
        ro_turn *u = us[i];
        if (u->result || u->error)
            continue;
        if (res[i]) {
            u->result = res[i];
            res[i] = NULL;
            count(r, u);
        } else if (unknown[i]) {
            u->error = strdup("the server has no such task (lost with its "
                              "store?)");
        } else if (rc == KG_EINVAL) {
            u->error = strdup(e.msg); /* refused: ends the turn */
        }
        done += u->result || u->error;
    }
    for (int i = 0; res && i < n; i++)
        json_decref(res[i]);
    free(ids);
    free(res);
    free(unknown);
    return done;
}

int ro_env_poll(ro_run *r, ro_turn **us, int n, double wait_s)
{
    int done = 0;
    if (n > KG_RESULTS_MAX_IDS)
        wait_s = 0; /* several requests: none may hold the others up */
    for (int b = 0; b < n && !r->poll_one_by_one; b += KG_RESULTS_MAX_IDS) {
        int k = n - b < KG_RESULTS_MAX_IDS ? n - b : KG_RESULTS_MAX_IDS;
        int d = poll_batch(r, us + b, k, wait_s);
        if (d < 0)
            return -1;
        done += d;
    }
    for (int i = 0; r->poll_one_by_one && i < n; i++) {
        if (us[i]->result || us[i]->error)
            continue;
        int d = poll_one(r, us[i]);
        if (d < 0)
            return -1;
        if (d > 0 && us[i]->result)
            count(r, us[i]);
        done += d;
    }
    return done;
}
