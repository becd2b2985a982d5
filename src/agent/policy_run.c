/* policy_run.c - kg_policy_run (policy.h): the multi loop that starts,
 * retries and finishes the chat requests. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/policy_impl.h"
#include "common/clock.h"
#include "common/log.h"

enum { WAITING, IN_FLIGHT, DONE };

static double deadline_ms(const kg_policy *p, const struct kg_policy_slot *s)
{
    return s->t0_ms + p->cfg.deadline_s * 1000;
}

/* Ends s: failed with a reason (why != NULL) or ok. */
static void end_slot(kg_policy *p, struct kg_policy_slot *s, const char *why)
{
    if (s->easy) {
        curl_multi_remove_handle(p->multi, s->easy);
        curl_easy_cleanup(s->easy);
        s->easy = NULL;
    }
    curl_slist_free_all(s->headers);
    s->headers = NULL;
    if (why) {
        kg_policy_req_clear(s->r);
        snprintf(s->r->error, sizeof s->r->error, "%s", why);
        s->r->ok = 0;
    } else {
        s->r->ok = 1;
        s->r->error[0] = 0;
    }
    s->r->seconds = (kg_now_ms() - s->t0_ms) / 1e3;
    free(s->body);
    kg_dynbuf_free(&s->reply);
    s->body = NULL;
    s->state = DONE;
}

/* Starts one attempt of s. 0, or -1 when s was ended. */
static int start_slot(kg_policy *p, struct kg_policy_slot *s, double now)
{
    if (!s->t0_ms)
        s->t0_ms = now;
    double left = deadline_ms(p, s) - now;
    if (left <= 0) {
        char why[120];
        snprintf(why, sizeof why, "no reply from the policy within %g s",
                 p->cfg.deadline_s);
        end_slot(p, s, why);
        return -1;
    }
    if (!s->body) {
        json_t *b = kg_policy_body(&p->cfg, s->r);
        s->body = b ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
    }
    s->easy = curl_easy_init();
    s->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (p->auth)
        s->headers = curl_slist_append(s->headers, p->auth);
    char tag[300];
    if (s->r->tag) {
        snprintf(tag, sizeof tag, "X-Kgym-Tag: %s", s->r->tag);
        s->headers = curl_slist_append(s->headers, tag);
    }
    if (!s->body || !s->easy || !s->headers) {
        end_slot(p, s, "out of memory");
        return -1;
    }
    kg_dynbuf_free(&s->reply); /* this attempt's reply */
    s->retry_after_s = -1;
    s->errbuf[0] = 0;
    CURL *e = s->easy;
    curl_easy_setopt(e, CURLOPT_URL, p->endpoint);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, s->body);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left + 1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, kg_policy_on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, kg_policy_on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    curl_multi_add_handle(p->multi, e);
    s->r->attempts++;
    s->state = IN_FLIGHT;
    return 0;
}

/* Schedules another attempt of s after a backoff, or ends it when no
 * attempt or no time is left. what: the failure, for the reason. */
static void retry_slot(kg_policy *p, struct kg_policy_slot *s, const char *what)
{
    curl_multi_remove_handle(p->multi, s->easy);
    curl_easy_cleanup(s->easy);
    s->easy = NULL;
    curl_slist_free_all(s->headers);
    s->headers = NULL;
    double pause = p->cfg.backoff_s;
    for (int i = 1; i < s->r->attempts && pause < p->cfg.backoff_max_s; i++)
        pause *= 2;
    if (pause > p->cfg.backoff_max_s)
        pause = p->cfg.backoff_max_s;
    pause *= 0.75 + 0.5 * ((unsigned)(s->r->attempts * 2654435761u +
                                      (unsigned)(size_t)s) % 1000) / 1000.0;
    if (s->retry_after_s >= 0)
        pause = s->retry_after_s < p->cfg.backoff_max_s
                    ? (double)s->retry_after_s
                    : p->cfg.backoff_max_s;
    double now = kg_now_ms();
    char why[300];
    if (s->r->attempts > p->cfg.max_retries) {
        snprintf(why, sizeof why, "%s (gave up after %d attempts)", what,
                 s->r->attempts);
        end_slot(p, s, why);
    } else if (now + pause * 1000 >= deadline_ms(p, s)) {
        snprintf(why, sizeof why, "%s; no time left before the %g s deadline",
                 what, p->cfg.deadline_s);
        end_slot(p, s, why);
    } else {
        kg_debug("policy: %s; retrying in %.2f s", what, pause);
        s->next_ms = now + pause * 1000;
        s->state = WAITING;
    }
}

/* "HTTP 400: MESSAGE" of a refused request, from {"error": {"message"}}
 * or the body's start. */
static void refusal(const struct kg_policy_slot *s, long status, char *out, size_t n)
{
    json_t *j = json_loadb(s->reply.p ? s->reply.p : "", s->reply.len,
                           JSON_ALLOW_NUL, NULL);
    json_t *e = json_object_get(j, "error");
    const char *m = json_string_value(json_object_get(e, "message"));
    if (!m)
        m = json_string_value(e);
    if (m)
        snprintf(out, n, "policy refused the request: HTTP %ld: %.200s",
                 status, m);
    else
        snprintf(out, n, "policy refused the request: HTTP %ld: %.120s",
                 status, s->reply.p ? s->reply.p : "");
    for (char *c = out; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    json_decref(j);
}

/* A transfer of s ended with rc. */
static void finish_slot(kg_policy *p, struct kg_policy_slot *s, CURLcode rc)
{
    long status = 0;
    char what[300];
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OPERATION_TIMEDOUT && kg_now_ms() >= deadline_ms(p, s)) {
        snprintf(what, sizeof what, "no reply from the policy within %g s",
                 p->cfg.deadline_s);
        end_slot(p, s, what);
    } else if (rc != CURLE_OK) {
        snprintf(what, sizeof what, "policy: %s",
                 s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
        retry_slot(p, s, what);
    } else if (status == 429 || status >= 500) {
        snprintf(what, sizeof what, "policy answered HTTP %ld", status);
        retry_slot(p, s, what);
    } else if (status != 200) {
        refusal(s, status, what, sizeof what);
        end_slot(p, s, what);
    } else {
        kg_err err = {{0}};
        kg_policy_req_clear(s->r);
        if (kg_policy_parse(s->r, s->reply.p ? s->reply.p : "", s->reply.len,
                            &err))
            end_slot(p, s, err.msg);
        else
            end_slot(p, s, NULL);
    }
}

/* Starts what may start now; returns the ms until something waiting may
 * start (at most max_ms). */
static long start_ready(kg_policy *p, long max_ms)
{
    double now = kg_now_ms(), wake = now + (double)max_ms;
    for (int i = 0; i < p->nq && p->inflight < p->cfg.concurrency; i++) {
        struct kg_policy_slot *s = p->q[i];
        if (s->state != WAITING)
            continue;
        if (s->next_ms > now) {
            wake = s->next_ms < wake ? s->next_ms : wake;
            continue;
        }
        if (p->cfg.rate > 0 && p->next_start_ms > now) {
            wake = p->next_start_ms < wake ? p->next_start_ms : wake;
            break;
        }
        if (p->cfg.rate > 0)
            p->next_start_ms =
                (p->next_start_ms > now - 1000 / p->cfg.rate
                     ? p->next_start_ms
                     : now) +
                1000 / p->cfg.rate;
        if (start_slot(p, s, now) == 0)
            p->inflight++;
    }
    long ms = (long)(wake - now);
    return ms < 1 ? 1 : ms;
}

int kg_policy_submit(kg_policy *p, kg_policy_req *r)
{
    if (p->nq == p->capq) {
        int cap = p->capq ? p->capq * 2 : 64;
        struct kg_policy_slot **q = realloc(p->q, (size_t)cap * sizeof *q);
        if (!q)
            return KG_ENOMEM;
        p->q = q;
        p->capq = cap;
    }
    struct kg_policy_slot *s = calloc(1, sizeof *s);
    if (!s)
        return KG_ENOMEM;
    kg_policy_req_clear(r);
    r->ok = r->attempts = 0;
    r->error[0] = 0;
    r->prompt_tokens = r->completion_tokens = -1;
    s->r = r;
    s->state = WAITING;
    p->q[p->nq++] = s;
    return 0;
}

int kg_policy_pending(const kg_policy *p)
{
    return p->nq;
}

int kg_policy_in_flight(const kg_policy *p)
{
    return p->inflight;
}

/* Moves the requests that are done out of the queue into done[]. */
static int collect_done(kg_policy *p, kg_policy_req **done)
{
    int k = 0, nd = 0;
    for (int i = 0; i < p->nq; i++) {
        if (p->q[i]->state == DONE) {
            done[nd++] = p->q[i]->r;
            free(p->q[i]);
        } else {
            p->q[k++] = p->q[i];
        }
    }
    p->nq = k;
    return nd;
}

int kg_policy_step(kg_policy *p, long max_wait_ms,
                   volatile sig_atomic_t *abort, kg_policy_req **done)
{
    if (abort && *abort) {
        for (int i = 0; i < p->nq; i++)
            if (p->q[i]->state != DONE)
                end_slot(p, p->q[i], "interrupted");
        p->inflight = 0;
        return collect_done(p, done);
    }
    long wait = start_ready(p, max_wait_ms);
    int running = 0;
    curl_multi_perform(p->multi, &running);
    CURLMsg *m;
    int left, finished = 0;
    while ((m = curl_multi_info_read(p->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct kg_policy_slot *s = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        finish_slot(p, s, m->data.result);
        p->inflight--;
        finished = 1;
    }
    int nd = collect_done(p, done);
    if (!nd && !finished && wait > 0)
        curl_multi_poll(p->multi, NULL, 0, (int)wait, NULL);
    return nd;
}

int kg_policy_run(kg_policy *p, kg_policy_req *reqs, int n,
                  volatile sig_atomic_t *abort, kg_policy_progress progress,
                  void *ctx)
{
    kg_policy_req **done = calloc((size_t)p->nq + (size_t)n + 1, sizeof *done);
    int rc = 0;
    for (int i = 0; i < n; i++)
        if (!done || kg_policy_submit(p, &reqs[i])) {
            snprintf(reqs[i].error, sizeof reqs[i].error, "out of memory");
            reqs[i].ok = 0;
            rc = KG_ENOMEM;
        }
    int ndone = 0;
    double last = 0;
    while (done && p->nq > 0) {
        ndone += kg_policy_step(p, 200, abort, done);
        if (progress && (kg_now_ms() - last > 250 || !p->nq)) {
            progress(ctx, p->inflight, ndone);
            last = kg_now_ms();
        }
    }
    free(done);
    return rc ? rc : abort && *abort ? KG_ESTATE : 0;
}
