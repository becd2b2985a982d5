/* policy.c - the policy client's engine (policy.h): libcurl's multi
 * interface driving many chat requests at once, with the concurrency cap,
 * the rate limit, retries with backoff and the per-request deadline. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agent/policy_impl.h"
#include "common/clock.h"
#include "common/log.h"

#define MAX_REPLY (64L * 1024 * 1024)

void kg_policy_cfg_default(kg_policy_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->temperature = -1;
    cfg->top_p = -1;
    cfg->concurrency = 64;
    cfg->deadline_s = 600;
    cfg->max_retries = 6;
    cfg->backoff_s = 1;
    cfg->backoff_max_s = 30;
}

int kg_policy_new(kg_policy **out, const kg_policy_cfg *cfg, kg_err *err)
{
    *out = NULL;
    if (!cfg->url || strncmp(cfg->url, "http", 4))
        return kg_errf(err, KG_EINVAL, "--policy %s: expected http(s)://...",
                       cfg->url ? cfg->url : "(none)");
    if (!cfg->model || !*cfg->model)
        return kg_errf(err, KG_EINVAL, "--model: a model name is needed");
    if (curl_global_init(CURL_GLOBAL_DEFAULT))
        return kg_errf(err, KG_EIO, "libcurl would not initialise");
    kg_policy *p = calloc(1, sizeof *p);
    if (!p)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    p->cfg = *cfg;
    p->url = strdup(cfg->url);
    p->model = strdup(cfg->model);
    p->key = cfg->key ? strdup(cfg->key) : NULL;
    p->multi = curl_multi_init();
    if (p->url) {
        size_t l = strlen(p->url);
        while (l && p->url[l - 1] == '/')
            p->url[--l] = 0;
        if (l >= 3 && !strcmp(p->url + l - 3, "/v1"))
            p->url[l - 3] = 0;
        size_t n = strlen(p->url) + 32;
        if ((p->endpoint = malloc(n)))
            snprintf(p->endpoint, n, "%s/v1/chat/completions", p->url);
    }
    if (p->key && (p->auth = malloc(strlen(p->key) + 32)))
        sprintf(p->auth, "Authorization: Bearer %s", p->key);
    p->cfg.url = p->url;
    p->cfg.model = p->model;
    p->cfg.key = p->key;
    if (p->cfg.concurrency < 1)
        p->cfg.concurrency = 1;
    if (!p->url || !p->model || !p->multi || !p->endpoint ||
        (p->key && !p->auth)) {
        kg_policy_free(p);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    *out = p;
    return 0;
}

void kg_policy_free(kg_policy *p)
{
    if (!p)
        return;
    free(p->q); /* empty: kg_policy_step ends every request it was given */
    if (p->multi)
        curl_multi_cleanup(p->multi);
    if (p->key)
        memset(p->key, 0, strlen(p->key));
    if (p->auth)
        memset(p->auth, 0, strlen(p->auth));
    free(p->url);
    free(p->model);
    free(p->key);
    free(p->auth);
    free(p->endpoint);
    free(p);
}

void kg_policy_req_clear(kg_policy_req *r)
{
    for (int i = 0; r->choices && i < r->nchoices; i++) {
        free(r->choices[i].content);
        free(r->choices[i].nul_content);
        free(r->choices[i].finish_reason);
        json_decref(r->choices[i].token_ids);
        json_decref(r->choices[i].logprobs);
    }
    free(r->choices);
    r->choices = NULL;
    r->nchoices = 0;
}

size_t kg_policy_on_data(char *d, size_t sz, size_t nm, void *ud)
{
    struct kg_policy_slot *s = ud;
    size_t n = sz * nm;
    if (n > (size_t)MAX_REPLY - 1 - s->reply.len ||
        kg_dynbuf_put(&s->reply, d, n))
        return 0; /* too large, or out of memory: the transfer fails */
    return n;
}

size_t kg_policy_on_header(char *d, size_t sz, size_t nm, void *ud)
{
    struct kg_policy_slot *s = ud;
    size_t n = sz * nm;
    if (n > 12 && !strncasecmp(d, "retry-after:", 12))
        s->retry_after_s = strtol(d + 12, NULL, 10);
    return n;
}

int kg_policy_health(kg_policy *p, kg_err *err)
{
    CURL *e = curl_easy_init();
    if (!e)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char url[2048], ebuf[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s/v1/models", p->url);
    struct curl_slist *h = p->auth ? curl_slist_append(NULL, p->auth) : NULL;
    struct kg_policy_slot s = {0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, kg_policy_on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &s);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    curl_slist_free_all(h);
    kg_dynbuf_free(&s.reply);
    if (rc != CURLE_OK)
        return kg_errf(err, KG_EUNAVAIL, "policy %s unreachable: %s", p->url,
                       ebuf[0] ? ebuf : curl_easy_strerror(rc));
    if (status == 401 || status == 403)
        return kg_errf(err, KG_EINVAL,
                       "policy %s refused the API key (HTTP %ld; "
                       "KGYM_POLICY_KEY or --key-file)",
                       p->url, status);
    return 0;
}
