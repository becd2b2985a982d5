/* rollout_turn.c - a trajectory's turn on the policy's side (rollout.h):
 * the first prompt, the tag of a request, the code read from a reply, and
 * the prompt of the next turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/prompt.h"
#include "agent/rollout.h"
#include "common/log.h"

json_t *ro_message(const char *role, const char *content)
{
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_string(content));
    return m;
}

static const char *backend(const ro_run *r)
{
    const char *b = json_string_value(json_object_get(r->o->fields, "backend"));
    return b ? b : "triton";
}

int ro_first_messages(ro_run *r, ro_traj *tr, kg_err *err)
{
    const kg_problem *p = &r->ps.p[tr->problem];
    tr->history = json_array();
    if (r->o->dataset_prompt && json_is_array(p->prompt)) {
        json_decref(tr->history);
        tr->history = json_deep_copy(p->prompt);
        tr->base = json_deep_copy(tr->history);
        return tr->base ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
    }
    if (!r->o->no_system)
        json_array_append_new(tr->history, ro_message("system", r->system));
    if (r->o->dataset_prompt && json_is_string(p->prompt)) {
        json_array_append_new(tr->history,
                              ro_message("user", json_string_value(p->prompt)));
        tr->base = json_deep_copy(tr->history);
        return tr->base ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
    }
    const char *keys[] = {"reference", "entry_point", "backend",
                          "backend_hint"};
    const char *vals[] = {p->reference,
                          p->entry_point ? p->entry_point : "Model",
                          backend(r), kg_prompt_backend_hint(backend(r))};
    char *text = kg_prompt_fill(r->first, keys, vals, 4);
    if (!text)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    json_array_append_new(tr->history, ro_message("user", text));
    free(text);
    tr->base = json_deep_copy(tr->history);
    return tr->base ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
}

/* The X-Kgym-Tag of a request: {"problem", "turn", "samples": [...]}
 * (for test servers and logs; a real server ignores the header). */
char *ro_make_tag(const ro_run *r, ro_traj **grp, int k, int t)
{
    json_t *s = json_array();
    for (int i = 0; i < k; i++)
        json_array_append_new(s, json_integer(grp[i]->sample));
    json_t *j = json_pack("{s:s, s:i, s:o}", "problem",
                          r->ps.p[grp[0]->problem].name, "turn", t,
                          "samples", s);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}

/* Reads choice c of q into turn t of tr; appends the reply to its chat. */
void ro_take_reply(ro_traj *tr, int t, const kg_policy_req *q, int c)
{
    ro_turn *u = &tr->turns[t];
    if (!q->ok || c >= q->nchoices || !q->choices[c].content) {
        u->error = strdup(!q->ok ? q->error
                                 : "the policy's reply has fewer choices "
                                   "than asked");
        return;
    }
    const kg_policy_choice *ch = &q->choices[c];
    u->reply = strdup(ch->content);
    u->finish_reason = ch->finish_reason ? strdup(ch->finish_reason) : NULL;
    u->token_ids = ch->token_ids ? json_incref(ch->token_ids) : NULL;
    u->logprobs = ch->logprobs ? json_incref(ch->logprobs) : NULL;
    u->prompt_tokens = q->prompt_tokens;
    u->completion_tokens = q->completion_tokens;
    u->choices = q->n;
    const char *why;
    /* with NULs in the reply the code is read from nul_content: a NUL
       outside the code is no matter, one inside it fails the turn */
    if (kg_extract_code(ch->nul_content ? ch->nul_content : ch->content,
                        &u->code, &why) != KG_CODE_OK) {
        u->error = strdup(why);
    } else if (strchr(u->code, (char)0xFF)) {
        free(u->code);
        u->code = NULL;
        u->error = strdup("the code of your last ```python block holds a NUL "
                          "character (U+0000), which no program may hold");
    }
    json_array_append_new(tr->history, ro_message("assistant", ch->content));
    tr->ctx[tr->nctx++] = t;
}

/* The feedback of turn t of tr for its next prompt (caller frees). */
static char *feedback_text(const ro_turn *u)
{
    char buf[600];
    const char *fb = json_string_value(json_object_get(u->result, "feedback"));
    if (u->result && fb && *fb)
        return strdup(fb);
    if (u->result) {
        const char *v =
            json_string_value(json_object_get(u->result, "verdict"));
        snprintf(buf, sizeof buf, "Verdict: %s", v ? v : "unknown");
    } else if (u->reply && !u->code) {
        snprintf(buf, sizeof buf,
                 "Your program was not evaluated: %s. Answer with the "
                 "complete program as one fenced ```python block that "
                 "defines `class ModelNew`.",
                 u->error ? u->error : "no code");
    } else if (u->code) {
        snprintf(buf, sizeof buf,
                 "The environment could not evaluate your program this time "
                 "(%s); it was not scored. Submit it again or improve it.",
                 u->error ? u->error : "no result");
    } else {
        return NULL;
    }
    return strdup(buf);
}

json_t *ro_feedback_message(ro_run *r, const ro_turn *u, int t)
{
    char turn[16];
    snprintf(turn, sizeof turn, "%d", t + 1);
    const char *keys[] = {"feedback", "turn"};
    const char *vals[] = {u->feedback ? u->feedback : "", turn};
    char *text = kg_prompt_fill(r->refine, keys, vals, 2);
    json_t *m = text ? ro_message("user", text) : NULL;
    free(text);
    return m;
}

void ro_next_message(ro_run *r, ro_traj *tr, int t)
{
    ro_turn *u = &tr->turns[t];
    if (!(u->feedback = feedback_text(u)))
        return;
    if (t + 1 < r->o->turns)
        json_array_append_new(tr->history, ro_feedback_message(r, u, t));
}

void ro_traj_clear(ro_traj *tr, int turns)
{
    json_decref(tr->history);
    json_decref(tr->base);
    tr->history = tr->base = NULL;
    tr->nctx = 0;
    for (int t = 0; t < turns; t++) {
        ro_turn *u = &tr->turns[t];
        json_decref(u->messages);
        free(u->reply);
        free(u->finish_reason);
        free(u->code);
        free(u->error);
        json_decref(u->token_ids);
        json_decref(u->logprobs);
        json_decref(u->result);
        json_decref(u->context);
        free(u->feedback);
        memset(u, 0, sizeof *u);
    }
}
