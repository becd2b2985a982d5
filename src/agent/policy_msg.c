/* policy_msg.c - the JSON of the OpenAI-compatible chat API: the request
 * body the policy client sends and the reply it reads back (policy.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/policy.h"

json_t *kg_policy_body(const kg_policy_cfg *cfg, const kg_policy_req *r)
{
    json_t *b = json_object();
    if (!b)
        return NULL;
    json_object_set_new(b, "model", json_string(cfg->model));
    json_object_set(b, "messages", r->messages);
    json_object_set_new(b, "n", json_integer(r->n));
    if (cfg->temperature >= 0)
        json_object_set_new(b, "temperature", json_real(cfg->temperature));
    if (cfg->top_p >= 0)
        json_object_set_new(b, "top_p", json_real(cfg->top_p));
    if (cfg->max_tokens > 0)
        json_object_set_new(b, "max_tokens", json_integer(cfg->max_tokens));
    if (cfg->stop && json_array_size(cfg->stop) > 0)
        json_object_set(b, "stop", cfg->stop);
    if (r->has_seed)
        json_object_set_new(b, "seed", json_integer(r->seed));
    if (cfg->logprobs) {
        json_object_set_new(b, "logprobs", json_true());
        json_object_set_new(b, "return_token_ids", json_true());
    }
    if (!json_object_get(b, "model") || !json_object_get(b, "n")) {
        json_decref(b);
        return NULL;
    }
    return b;
}

/* The per-token logprobs of a choice (logprobs.content[].logprob) as an
 * array of numbers (new reference), or NULL when there are none. */
static json_t *choice_logprobs(const json_t *ch)
{
    json_t *content = json_object_get(json_object_get(ch, "logprobs"),
                                      "content");
    if (!json_is_array(content))
        return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *tok;
    json_array_foreach(content, i, tok)
    {
        json_t *lp = json_object_get(tok, "logprob");
        if (!json_is_number(lp)) {
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, json_real(json_number_value(lp)));
    }
    return out;
}

/* Reads choice ch into c. 0, or -1 with why set. */
static int read_choice(kg_policy_choice *c, const json_t *ch, const char **why)
{
    json_t *msg = json_object_get(ch, "message");
    if (!json_is_object(msg)) {
        *why = "a choice has no message object";
        return -1;
    }
    json_t *content = json_object_get(msg, "content");
    if (content && !json_is_string(content) && !json_is_null(content)) {
        *why = "a choice's message.content is not a string";
        return -1;
    }
    const char *text = json_is_string(content) ? json_string_value(content)
                                               : "";
    size_t len = json_is_string(content) ? json_string_length(content) : 0;
    if (memchr(text, 0, len)) {
        /* a JSON string may hold \u0000: the reply is kept, each NUL as
           U+FFFD; nul_content marks them for the code extractor */
        size_t nuls = 0;
        for (size_t k = 0; k < len; k++)
            nuls += !text[k];
        c->content = malloc(len + 2 * nuls + 1);
        c->nul_content = malloc(len + 1);
        if (!c->content || !c->nul_content) {
            *why = "out of memory";
            return -1;
        }
        size_t o = 0;
        for (size_t k = 0; k < len; k++) {
            if (text[k]) {
                c->content[o++] = text[k];
                c->nul_content[k] = text[k];
            } else {
                memcpy(c->content + o, "\xEF\xBF\xBD", 3);
                o += 3;
                c->nul_content[k] = (char)0xFF;
            }
        }
        c->content[o] = 0;
        c->nul_content[len] = 0;
    } else {
        c->content = strdup(text);
    }
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    c->finish_reason = fr ? strdup(fr) : NULL;
    json_t *ids = json_object_get(ch, "token_ids");
    c->token_ids = json_is_array(ids) ? json_incref(ids) : NULL;
    c->logprobs = choice_logprobs(ch);
    if (!c->content) {
        *why = "out of memory";
        return -1;
    }
    return 0;
}

static long usage_field(const json_t *reply, const char *k)
{
    json_t *v = json_object_get(json_object_get(reply, "usage"), k);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

int kg_policy_parse(kg_policy_req *r, const char *body, size_t len,
                    kg_err *err)
{
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (!j)
        return kg_errf(err, KG_EPARSE,
                       "policy reply is not JSON (line %d, column %d: %s)",
                       je.line, je.column, je.text);
    json_t *choices = json_object_get(j, "choices");
    const char *why = NULL;
    size_t n = json_array_size(choices);
    if (!json_is_object(j))
        why = "policy reply is not a JSON object";
    else if (!json_is_array(choices) || n == 0)
        why = "policy reply has no choices";
    else if (!(r->choices = calloc(n, sizeof *r->choices)))
        why = "out of memory";
    for (size_t i = 0; !why && i < n; i++) {
        const json_t *ch = json_array_get(choices, i);
        json_t *ix = json_object_get(ch, "index");
        size_t at = json_is_integer(ix) ? (size_t)json_integer_value(ix) : i;
        if (at >= n || r->choices[at].content)
            why = "policy reply's choices have bad or repeated indices";
        else if (read_choice(&r->choices[at], ch, &why))
            break;
        r->nchoices = (int)n;
    }
    r->nchoices = (int)n;
    r->prompt_tokens = usage_field(j, "prompt_tokens");
    r->completion_tokens = usage_field(j, "completion_tokens");
    json_decref(j);
    if (why) {
        kg_policy_req_clear(r);
        return kg_errf(err, KG_EPARSE, "%s", why);
    }
    return 0;
}
