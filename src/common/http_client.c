/* http_client.c - kgym's HTTP client over one reused libcurl easy handle
 * (see http_client.h). */
#include "common/http_client.h"
#include "kgym/dynbuf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

struct kg_client {
    CURL *curl;
    char *base;
    char *auth; /* "Authorization: Bearer ..." or NULL */
    long connect_ms;
    volatile sig_atomic_t *abort_flag;
    char errbuf[CURL_ERROR_SIZE];
};


static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void global_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int kg_client_new(kg_client **out, const char *base_url, const char *token,
                  kg_err *err)
{
    *out = NULL;
    if (!base_url || strncmp(base_url, "http", 4))
        return kg_errf(err, KG_EINVAL, "server URL %s: expected http://...",
                       base_url ? base_url : "(null)");
    pthread_once(&curl_once, global_init);
    if (curl_init_rc != CURLE_OK)
        return kg_errf(err, KG_EIO, "libcurl: %s",
                       curl_easy_strerror(curl_init_rc));
    kg_client *c = calloc(1, sizeof *c);
    if (!c)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    c->curl = curl_easy_init();
    c->base = strdup(base_url);
    c->connect_ms = 5000;
    if (token) {
        size_t n = strlen(token) + 32;
        c->auth = malloc(n);
        if (c->auth)
            snprintf(c->auth, n, "Authorization: Bearer %s", token);
    }
    if (!c->curl || !c->base || (token && !c->auth)) {
        kg_client_free(c);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    size_t l = strlen(c->base);
    while (l > 0 && c->base[l - 1] == '/')
        c->base[--l] = 0;
    *out = c;
    return 0;
}

void kg_client_free(kg_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    free(c->base);
    if (c->auth) {
        memset(c->auth, 0, strlen(c->auth));
        free(c->auth);
    }
    free(c);
}

void kg_client_set_connect_timeout(kg_client *c, long ms)
{
    c->connect_ms = ms;
}

void kg_client_set_abort(kg_client *c, volatile sig_atomic_t *flag)
{
    c->abort_flag = flag;
}

/* curl's write callback: the body into a kg_dynbuf (kgym/dynbuf.h). */
static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    size_t n = size * nmemb;
    return kg_dynbuf_put(ud, p, n) ? 0 : n; /* 0: curl's write error */
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                       curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    kg_client *c = ud;
    return c->abort_flag && *c->abort_flag ? 1 : 0;
}

int kg_client_request(kg_client *c, const char *method, const char *path,
                      const json_t *body, long timeout_ms, kg_client_resp *resp,
                      kg_err *err)
{
    memset(resp, 0, sizeof *resp);
    char *data = NULL;
    if (body && !(data = json_dumps(body, JSON_COMPACT)))
        return kg_errf(err, KG_ENOMEM, "out of memory (request body)");
    size_t ul = strlen(c->base) + strlen(path) + 1;
    char *url = malloc(ul);
    if (!url) {
        free(data);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    snprintf(url, ul, "%s%s", c->base, path);

    struct curl_slist *hdr = NULL, *h;
    if (c->auth && (h = curl_slist_append(hdr, c->auth)))
        hdr = h;
    if (data && (h = curl_slist_append(hdr, "Content-Type: application/json")))
        hdr = h;
    if ((h = curl_slist_append(hdr, "Expect:"))) /* no 100-continue wait */
        hdr = h;

    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    CURL *k = c->curl;
    curl_easy_reset(k); /* options only: the connection cache stays */
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(k, CURLOPT_CUSTOMREQUEST, method);
    if (data) {
        curl_easy_setopt(k, CURLOPT_POSTFIELDS, data);
        curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)strlen(data));
    } else if (!strcmp(method, "GET")) {
        curl_easy_setopt(k, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
    curl_easy_setopt(k, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->abort_flag) {
        curl_easy_setopt(k, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(k, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(k, CURLOPT_XFERINFODATA, c);
    }
    c->errbuf[0] = 0;
    CURLcode cc = curl_easy_perform(k);
    int rc = 0;
    if (cc != CURLE_OK) {
        const char *why = c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc);
        if (cc == CURLE_OPERATION_TIMEDOUT)
            rc = kg_errf(err, KG_ETIMEOUT, "%s %s: %s", method, url, why);
        else if (cc == CURLE_ABORTED_BY_CALLBACK)
            rc = kg_errf(err, KG_ESTATE, "%s %s: aborted", method, url);
        else if (cc == CURLE_OUT_OF_MEMORY || cc == CURLE_WRITE_ERROR)
            rc = kg_errf(err, KG_ENOMEM, "%s %s: %s", method, url, why);
        else
            rc = kg_errf(err, KG_EUNAVAIL, "%s %s: %s", method, url, why);
        kg_dynbuf_free(&b);
    } else {
        curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &resp->status);
        resp->body = kg_dynbuf_take(&b, &resp->len);
        if (!resp->body)
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
        if (resp->body && resp->len > 0) {
            json_error_t je;
            resp->json = json_loadb(resp->body, resp->len, 0, &je);
        }
    }
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(k, CURLOPT_POSTFIELDS, NULL);
    curl_slist_free_all(hdr);
    free(url);
    free(data);
    return rc;
}

void kg_client_resp_free(kg_client_resp *resp)
{
    if (!resp)
        return;
    json_decref(resp->json);
    free(resp->body);
    memset(resp, 0, sizeof *resp);
}

const char *kg_client_error_text(const kg_client_resp *resp, char *buf,
                                 size_t n)
{
    json_t *e = json_object_get(resp->json, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (code || msg)
        snprintf(buf, n, "%ld %s: %s", resp->status, code ? code : "error",
                 msg ? msg : "");
    else
        snprintf(buf, n, "HTTP %ld: %.200s", resp->status,
                 resp->body ? resp->body : "");
    return buf;
}

/* A token file is a few lines; a bigger one is not a token file. */
#define MAX_TOKEN_FILE (1024 * 1024)

int kg_client_read_token(const char *path, char **token, kg_err *err)
{
    *token = NULL;
    /* O_NONBLOCK and fstat first: a FIFO or a device is refused, not read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return kg_errf(err, KG_EIO, "token file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size > MAX_TOKEN_FILE) {
        close(fd);
        return kg_errf(err, KG_EINVAL,
                       "token file %s: not a regular file of at most %d bytes",
                       path, MAX_TOKEN_FILE);
    }
    char *buf = malloc(MAX_TOKEN_FILE + 1);
    size_t len = 0;
    int rc = buf ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
    while (!rc && len <= MAX_TOKEN_FILE) {
        ssize_t r = read(fd, buf + len, MAX_TOKEN_FILE + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = kg_errf(err, KG_EIO, "token file %s: %s", path,
                         strerror(errno));
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (!rc && len > MAX_TOKEN_FILE)
        rc = kg_errf(err, KG_EINVAL, "token file %s: larger than %d bytes",
                     path, MAX_TOKEN_FILE);
    if (!rc)
        rc = kg_errf(err, KG_EPARSE, "token file %s: no token in it", path);
    int lineno = 0;
    /* lines by their byte length: a NUL is refused, never a token's end */
    for (size_t pos = 0; buf && rc == KG_EPARSE && pos < len;) {
        char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        lineno++;
        for (size_t i = 0; i < n && rc == KG_EPARSE; i++) {
            unsigned char c = (unsigned char)s[i];
            if ((c < ' ' && c != '\t' && c != '\r') || c == 127)
                rc = kg_errf(err, KG_EINVAL,
                             "token file %s:%d: a NUL or control byte (0x%02x)",
                             path, lineno, c);
        }
        if (rc != KG_EPARSE)
            break;
        while (n > 0 && isspace((unsigned char)*s)) {
            s++;
            n--;
        }
        while (n > 0 && isspace((unsigned char)s[n - 1]))
            n--;
        if (n == 0 || *s == '#')
            continue;
        if (!(*token = strndup(s, n)))
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
        else
            rc = 0;
    }
    if (buf) {
        explicit_bzero(buf, len);
        free(buf);
    }
    return rc;
}
