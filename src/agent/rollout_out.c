/* rollout_out.c - the --out JSONL of `kgym rollout` (rollout.h): an
 * existing file is checked to be one of ours and read for what it holds
 * (a rerun skips finished trajectories), rows are appended and flushed a
 * trajectory at a time; and the progress line. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/rollout.h"
#include "common/clock.h"
#include "common/log.h"

static int find_problem(const ro_run *r, const char *name)
{
    for (int i = 0; name && i < r->ps.n; i++)
        if (!strcmp(r->ps.p[i].name, name))
            return i;
    return -1;
}

/* Records one row of an earlier run. 0, or -1 when it is not our row. */
static int take_row(ro_run *r, const json_t *row)
{
    const char *schema = json_string_value(json_object_get(row, "schema"));
    if (!schema || strcmp(schema, RO_SCHEMA))
        return -1;
    int p = find_problem(r, json_string_value(json_object_get(row, "problem")));
    json_t *s = json_object_get(row, "sample"), *t = json_object_get(row, "turn");
    if (!json_is_integer(s) || !json_is_integer(t))
        return -1;
    long long sv = json_integer_value(s), tv = json_integer_value(t);
    if (p < 0 || sv < 0 || sv >= r->o->samples || tv < 0 || tv >= r->o->turns)
        return 0; /* another problem set or shape: not ours to count */
    ro_prior *pr = &r->prior[(size_t)p * (size_t)r->o->samples + (size_t)sv];
    json_t *rw = json_object_get(row, "reward");
    pr->turns_seen |= 1ull << tv;
    pr->reward[tv] = json_is_number(rw) ? json_number_value(rw) : NAN;
    return 0;
}

/* Reads an existing --out. A cut last line (no newline, not JSON) is
 * dropped from the file. */
static int read_existing(ro_run *r, kg_err *err)
{
    FILE *f = fopen(r->o->out, "r");
    if (!f)
        return errno == ENOENT ? 0
                               : kg_errf(err, KG_EIO, "--out %s: %s",
                                         r->o->out, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0, off = 0, cut = -1;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        no++;
        json_t *row = json_loads(line, 0, NULL);
        if (!row && line[len - 1] != '\n')
            cut = off;
        else if (!row || take_row(r, row))
            rc = kg_errf(err, KG_EINVAL,
                         "--out %s: not a kgym rollout file (line %ld is "
                         "not one of its rows); refusing to append to it",
                         r->o->out, no);
        json_decref(row);
        off += len;
    }
    free(line);
    fclose(f);
    if (rc == 0 && cut >= 0) {
        kg_warn("--out %s: its last line was cut off; dropped it", r->o->out);
        if (truncate(r->o->out, cut) < 0)
            rc = kg_errf(err, KG_EIO, "--out %s: %s", r->o->out,
                         strerror(errno));
    }
    return rc;
}

int ro_out_open(ro_run *r, kg_err *err)
{
    size_t n = (size_t)r->ps.n * (size_t)r->o->samples;
    r->prior = calloc(n ? n : 1, sizeof *r->prior);
    if (!r->prior)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < RO_MAX_TURNS; t++)
            r->prior[i].reward[t] = NAN;
    struct stat st;
    if (stat(r->o->out, &st) == 0 && !S_ISREG(st.st_mode))
        return kg_errf(err, KG_EINVAL, "--out %s: not a regular file",
                       r->o->out);
    int rc = read_existing(r, err);
    if (rc)
        return rc;
    r->out = fopen(r->o->out, "a+");
    if (!r->out)
        return kg_errf(err, KG_EIO, "--out %s: %s", r->o->out,
                       strerror(errno));
    /* a last row without its newline (written by hand?) gets one */
    if (fseek(r->out, -1, SEEK_END) == 0 && fgetc(r->out) != '\n')
        fputc('\n', r->out);
    fseek(r->out, 0, SEEK_END);
    return 0;
}

static json_t *num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static json_t *text(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* The result summary of a row (new reference), null without a result. */
static json_t *summary(const ro_turn *u)
{
    if (!u->result)
        return json_null();
    const json_t *res = u->result;
    json_t *hr = json_object_get(res, "hack_reasons");
    json_t *s = json_object();
    json_object_set_new(s, "status",
                        text(json_string_value(json_object_get(res, "status"))));
    json_object_set_new(s, "verdict", text(json_string_value(
                                          json_object_get(res, "verdict"))));
    json_object_set_new(s, "error_code", text(json_string_value(json_object_get(
                                             res, "error_code"))));
    json_object_set_new(s, "correct", json_boolean(u->correct));
    json_object_set_new(s, "hacked", json_boolean(u->hacked));
    json_object_set_new(s, "speedup", u->correct ? num(u->speedup)
                                                 : json_null());
    json_object_set_new(s, "coverage",
                        u->coverage >= 0 ? num(u->coverage) : json_null());
    json_object_set_new(s, "hack_reasons",
                        json_is_array(hr) ? json_copy(hr) : json_array());
    /* for `kgym report`: the kernel's median (another baseline's speedup
     * is reckoned from it) and what the evaluation cost */
    json_t *km = json_object_get(res, "kernel_runtime");
    json_t *rm = json_object_get(res, "reference_runtime");
    json_t *tot = json_object_get(json_object_get(res, "timings"), "total");
    json_object_set_new(s, "kernel_ms",
                        json_is_number(km) ? num(json_number_value(km))
                                           : json_null());
    json_object_set_new(s, "ref_ms", json_is_number(rm)
                                         ? num(json_number_value(rm))
                                         : json_null());
    json_object_set_new(s, "eval_s",
                        json_is_number(tot)
                            ? num(json_number_value(tot) / 1e3)
                            : json_null());
    return s;
}

static json_t *usage(const ro_turn *u)
{
    if (!u->reply)
        return json_null();
    json_t *j = json_object();
    json_object_set_new(j, "prompt_tokens", u->prompt_tokens >= 0
                                                ? json_integer(u->prompt_tokens)
                                                : json_null());
    json_object_set_new(j, "completion_tokens",
                        u->completion_tokens >= 0
                            ? json_integer(u->completion_tokens)
                            : json_null());
    json_object_set_new(j, "choices", json_integer(u->choices));
    return j;
}

/* Row of turn t of tr (new reference). */
static json_t *make_row(const ro_run *r, const ro_traj *tr, int t)
{
    const ro_turn *u = &tr->turns[t];
    const char *name = r->ps.p[tr->problem].name;
    char id[600];
    snprintf(id, sizeof id, "%s:%d", name, tr->sample);
    json_t *row = json_object();
    json_object_set_new(row, "schema", json_string(RO_SCHEMA));
    json_object_set_new(row, "trajectory_id", json_string(id));
    json_object_set_new(row, "problem", json_string(name));
    json_object_set_new(row, "sample", json_integer(tr->sample));
    json_object_set_new(row, "turn", json_integer(t));
    json_object_set(row, "messages", u->messages ? u->messages : json_null());
    json_object_set(row, "context", u->context ? u->context : json_null());
    json_object_set_new(row, "reply", text(u->reply));
    json_object_set_new(row, "finish_reason", text(u->finish_reason));
    json_object_set_new(row, "code", text(u->code));
    json_object_set(row, "token_ids", u->token_ids ? u->token_ids : json_null());
    json_object_set(row, "logprobs", u->logprobs ? u->logprobs : json_null());
    json_object_set_new(row, "usage", usage(u));
    json_object_set_new(row, "task_id",
                        u->task_id[0] ? json_string(u->task_id) : json_null());
    json_object_set_new(row, "result", summary(u));
    json_t *rb = json_object_get(r->o->fields, "reference_backend");
    json_object_set_new(row, "reference_backend",
                        json_is_string(rb) ? json_copy(rb)
                                           : json_string("eager"));
    json_object_set_new(row, "feedback", text(u->feedback));
    json_object_set_new(row, "error", text(u->error));
    json_object_set_new(row, "valid", json_boolean(u->valid));
    json_object_set_new(row, "reward", num(u->reward));
    json_object_set_new(row, "return", num(u->ret));
    json_object_set_new(row, "advantage_trloo", num(u->adv_trloo));
    json_object_set_new(row, "advantage_grpo", num(u->adv_grpo));
    json_object_set_new(row, "keep", json_boolean(u->keep));
    json_object_set_new(row, "keep_prob", num(u->keep_prob));
    json_object_set_new(row, "loss_mask", json_boolean(u->loss_mask));
    json_object_set_new(row, "best_turn", u->best_turn >= 0
                                              ? json_integer(u->best_turn)
                                              : json_null());
    return row;
}

int ro_out_write(ro_run *r, const ro_traj *tr, kg_err *err)
{
    for (int t = 0; t < r->o->turns; t++) {
        json_t *row = make_row(r, tr, t);
        char *s = row ? json_dumps(row, JSON_COMPACT) : NULL;
        json_decref(row);
        if (!s)
            return kg_errf(err, KG_ENOMEM, "out of memory");
        fputs(s, r->out);
        fputc('\n', r->out);
        free(s);
    }
    if (fflush(r->out) || ferror(r->out))
        return kg_errf(err, KG_EIO, "--out %s: %s", r->o->out,
                       strerror(errno));
    r->st.traj_done++;
    return 0;
}

void ro_progress(ro_run *r, const char *phase, int force)
{
    static double last;
    double now = kg_now_ms();
    if (!force && (!r->st.tty || now - last < 200))
        return;
    last = now;
    double s = (now - r->st.t0_ms) / 1e3;
    char line[400];
    snprintf(line, sizeof line,
             "%s: rollouts %ld/%ld, policy %ld in flight, evaluations %ld in "
             "flight, %ld done (%.2f/s), pass %ld, hacked %ld, no code %ld, "
             "policy failures %ld",
             phase, r->st.traj_done, r->st.traj_total, r->st.policy_in_flight,
             r->st.evals_in_flight, r->st.evals_done,
             s > 0 ? r->st.evals_done / s : 0.0, r->st.pass, r->st.hacked,
             r->st.no_code, r->st.policy_failed);
    if (r->st.tty) {
        fprintf(stderr, "\r%s: %s\033[K", r->program, line);
        r->st.line_open = 1;
    } else
        kg_info("%s", line);
}

void ro_progress_end(ro_run *r)
{
    if (r->st.tty && r->st.line_open)
        fputc('\n', stderr);
    r->st.line_open = 0;
}
