/* policy_scripted.c - `kgym policy scripted DIR`: an OpenAI-compatible chat
 * server that answers from a folder of replies per problem, for trying the
 * rollout loop without a model, for tests, and as a cold-start teacher
 * (docs/agent.md, "A scripted policy").
 *
 * Layout: DIR/<problem>/ holds the replies of the problem that `kgym
 * rollout` names <problem> ("level1/1_GELU" for a KernelBench tree, the
 * file stem for a folder of references). A *.py file is one reply, sent
 * inside a ```python fence; a *.md or *.txt file is one whole reply, sent
 * as it is (prose, no code, a cut-off block). Wrong or cheating kernels are
 * just more files; a symlink to a file counts as the file. Other files are
 * ignored.
 *
 * The problem of a request: its X-Kgym-Tag header's "problem" (kgym
 * rollout sends it); else the problem (--problems PATH) whose reference
 * program the request's messages quote (kgym's first prompt quotes it in
 * full; the longest match wins); else the only problem of DIR. Each choice
 * gets the problem's next file in name order (--pick cycle), or a random
 * one (--pick random, --seed). Replies carry no logprobs or token ids. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>

#include "agent/problems.h"
#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "common/code_file.h"
#include "common/log.h"
#include "common/request.h"
#include "kgym/dynbuf.h"

#define SP_MAX_BODY (64u << 20)
#define SP_MAX_FILES 100000
#define SP_MAX_N 1024

typedef struct sp_problem {
    char *name;
    char **replies; /* the reply texts, in file name order */
    int n;
    unsigned long next; /* --pick cycle: the next file */
} sp_problem;

typedef struct sp_server {
    sp_problem *p;
    int n;
    kg_problems refs; /* --problems: references to recognise */
    int random;
    uint64_t rng;
    pthread_mutex_t lock;
    unsigned long requests;
} sp_server;

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig)
{
    stop_sig = sig;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kgym policy scripted DIR [--host H] [--port P] "
            "[--problems PATH]\n"
            "                              [--pick cycle|random] [--seed S]\n"
            "\n"
            "An OpenAI-compatible chat server (POST /v1/chat/completions, "
            "GET /v1/models)\n"
            "answering from DIR/<problem>/: a *.py file is one reply in a "
            "```python fence,\n"
            "a *.md or *.txt file one whole reply. <problem> is the name "
            "kgym rollout gives\n"
            "(level1/1_GELU for a KernelBench tree). Prints its URL, then "
            "serves until\n"
            "SIGINT/SIGTERM.\n"
            "\n"
            "  --host H          address to listen on (default 127.0.0.1)\n"
            "  --port P          port (default 8100; 0: any free one)\n"
            "  --problems PATH   recognise a request's problem by the "
            "reference its prompt\n"
            "                    quotes (needed when the client sends no "
            "X-Kgym-Tag)\n"
            "  --pick cycle      each choice takes the problem's next file "
            "(default)\n"
            "  --pick random     a random file per choice, from --seed S "
            "(default 0)\n");
}

/* --- loading DIR ----------------------------------------------------- */

static const char *walk_root;
static sp_server *walk_srv;
static kg_err *walk_err;

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a > b && !strcmp(s + a - b, tail);
}

/* The problem named name, added when new; NULL when out of memory. */
static sp_problem *problem_of(sp_server *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->p[i].name, name))
            return &s->p[i];
    sp_problem *np = realloc(s->p, (size_t)(s->n + 1) * sizeof *np);
    if (!np)
        return NULL;
    s->p = np;
    sp_problem *p = &s->p[s->n];
    memset(p, 0, sizeof *p);
    if (!(p->name = strdup(name)))
        return NULL;
    s->n++;
    return p;
}

/* The reply a file makes: a .py wrapped in a fence, else its text. A
 * folder's entry may be a link to a solution kept elsewhere: it is
 * resolved first (kg_read_code_file refuses links unread). */
static char *reply_of(const char *path, kg_err *err)
{
    size_t len;
    char real[PATH_MAX];
    if (!realpath(path, real))
        return kg_errf(err, KG_ENOTFOUND, "%s: %s", path, strerror(errno)),
               NULL;
    char *text = kg_read_code_file(real, "kernel_code", &len, err);
    if (!text || !ends_with(path, ".py"))
        return text;
    const char *nl = len && text[len - 1] == '\n' ? "" : "\n";
    size_t cap = len + 32;
    char *r = malloc(cap);
    if (r)
        snprintf(r, cap, "```python\n%s%s```\n", text, nl);
    free(text);
    if (!r)
        kg_errf(err, KG_ENOMEM, "out of memory");
    return r;
}

static int on_file(const char *path, const struct stat *st, int type,
                   struct FTW *ftw)
{
    (void)st;
    /* a symlink counts when it names a regular file (read_replies checks) */
    if ((type != FTW_F && type != FTW_SL) || ftw->level < 2 ||
        !(ends_with(path, ".py") || ends_with(path, ".md") ||
          ends_with(path, ".txt")))
        return 0;
    size_t root = strlen(walk_root);
    /* the problem: the folder's path under DIR */
    char name[PATH_MAX];
    snprintf(name, sizeof name, "%.*s", (int)(ftw->base - root - 2),
             path + root + 1);
    if (!problem_of(walk_srv, name))
        return kg_errf(walk_err, KG_ENOMEM, "out of memory"), 1;
    return 0;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every reply file of dir into s. 0, or an error code with err set. */
static int load_dir(sp_server *s, const char *dir, kg_err *err)
{
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return kg_errf(err, KG_ENOTFOUND, "%s: %s", dir,
                       errno ? strerror(errno) : "not a folder");
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s", dir);
    for (size_t l = strlen(root); l > 1 && root[l - 1] == '/'; l--)
        root[l - 1] = 0;
    walk_root = root, walk_srv = s, walk_err = err;
    /* the walk finds the problems; read_replies reads their files */
    int rc = nftw(root, on_file, 32, FTW_PHYS);
    if (rc)
        return rc < 0 ? kg_errf(err, KG_EIO, "%s: %s", dir, strerror(errno))
                      : KG_EINVAL;
    if (s->n == 0)
        return kg_errf(err, KG_EINVAL,
                       "%s holds no replies: put them in %s/<problem>/"
                       "*.py (or *.md, *.txt)",
                       dir, dir);
    return 0;
}

/* The replies of each problem, read in file name order (nftw gives no
 * order) so that --pick cycle is the same on every machine. */
static int read_replies(sp_server *s, const char *root, kg_err *err)
{
    for (int i = 0; i < s->n; i++) {
        sp_problem *p = &s->p[i];
        char dir[2 * PATH_MAX + 2];
        snprintf(dir, sizeof dir, "%s/%s", root, p->name);
        char **names = NULL;
        int n = 0;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)) && n < SP_MAX_FILES) {
            if (!(ends_with(de->d_name, ".py") ||
                  ends_with(de->d_name, ".md") ||
                  ends_with(de->d_name, ".txt")))
                continue;
            char full[sizeof dir + NAME_MAX + 2];
            snprintf(full, sizeof full, "%s/%s", dir, de->d_name);
            struct stat st;
            if (stat(full, &st) || !S_ISREG(st.st_mode))
                continue;
            char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
            if (!nn || !(nn[n] = strdup(full))) {
                names = nn;
                break;
            }
            names = nn;
            n++;
        }
        if (d)
            closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp_path);
        int rc = n && !(p->replies = calloc((size_t)n, sizeof *p->replies))
                     ? kg_errf(err, KG_ENOMEM, "out of memory")
                     : 0;
        for (int k = 0; k < n; k++) {
            if (!rc && !(p->replies[p->n] = reply_of(names[k], err)))
                rc = KG_EINVAL;
            else if (!rc)
                p->n++;
            free(names[k]);
        }
        free(names);
        if (rc)
            return rc;
    }
    return 0;
}

/* --- answering -------------------------------------------------------- */

struct conn {
    kg_dynbuf body; /* calloc'd: empty; on_request checks SP_MAX_BODY */
    int too_large;
};

static enum MHD_Result send_json(struct MHD_Connection *mc, unsigned status,
                                 json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(mc, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *mc, unsigned status,
                                  const char *msg)
{
    return send_json(mc, status,
                     json_pack("{s:{s:s, s:s}}", "error", "message", msg,
                               "type", "invalid_request_error"));
}

/* The problem a request names in its X-Kgym-Tag header, or NULL. */
static sp_problem *by_tag(sp_server *s, const char *tag)
{
    json_t *j = tag ? json_loads(tag, 0, NULL) : NULL;
    const char *name = json_string_value(json_object_get(j, "problem"));
    sp_problem *p = NULL;
    for (int i = 0; name && i < s->n && !p; i++)
        if (!strcmp(s->p[i].name, name))
            p = &s->p[i];
    json_decref(j);
    return p;
}

/* The problem whose reference a message quotes (the longest), or NULL. */
static sp_problem *by_reference(sp_server *s, const json_t *messages)
{
    const kg_problem *best = NULL;
    size_t best_len = 0, i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        const char *text = json_string_value(json_object_get(m, "content"));
        for (int k = 0; text && k < s->refs.n; k++) {
            const kg_problem *q = &s->refs.p[k];
            size_t l = strlen(q->reference);
            while (l && (q->reference[l - 1] == '\n' ||
                         q->reference[l - 1] == ' '))
                l--;
            if (l > best_len && memmem(text, strlen(text), q->reference, l))
                best = q, best_len = l;
        }
    }
    for (int k = 0; best && k < s->n; k++)
        if (!strcmp(s->p[k].name, best->name))
            return &s->p[k];
    return NULL;
}

/* The next reply of p (its index), under s->lock. */
static int pick(sp_server *s, sp_problem *p)
{
    if (!s->random)
        return (int)(p->next++ % (unsigned long)p->n);
    /* xorshift64*: any generator does; this one is seeded by --seed */
    s->rng ^= s->rng >> 12, s->rng ^= s->rng << 25, s->rng ^= s->rng >> 27;
    return (int)((s->rng * 2685821657736338717ull >> 33) % (uint64_t)p->n);
}

static long words(const char *t)
{
    long n = 0;
    for (int in = 0; *t; t++) {
        int sp = *t == ' ' || *t == '\n' || *t == '\t' || *t == '\r';
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

static enum MHD_Result chat(sp_server *s, struct MHD_Connection *mc,
                            struct conn *c)
{
    json_error_t je;
    json_t *req = json_loadb(c->body.p ? c->body.p : "", c->body.len,
                             JSON_ALLOW_NUL, &je);
    json_t *messages = json_object_get(req, "messages");
    json_t *nj = json_object_get(req, "n");
    if (!json_is_object(req) || !json_is_array(messages)) {
        json_decref(req);
        return send_error(mc, 400,
                          "the body must be a JSON object with a "
                          "\"messages\" array");
    }
    json_int_t n = nj ? (json_is_integer(nj) ? json_integer_value(nj) : -1)
                      : 1;
    if (n < 1 || n > SP_MAX_N) {
        json_decref(req);
        return send_error(mc, 400, "n must be an integer from 1 to 1024");
    }
    const char *tag =
        MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "X-Kgym-Tag");
    sp_problem *p = by_tag(s, tag);
    if (!p)
        p = by_reference(s, messages);
    if (!p && s->n == 1)
        p = &s->p[0];
    if (!p) {
        json_decref(req);
        return send_error(
            mc, 400,
            "kgym policy scripted cannot tell this request's problem: no "
            "X-Kgym-Tag naming a problem of its folder, and no reference of "
            "--problems quoted in the messages");
    }
    long prompt_tokens = 0;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        const char *t = json_string_value(json_object_get(m, "content"));
        prompt_tokens += t ? words(t) : 0;
    }
    json_t *choices = json_array();
    long completion = 0;
    pthread_mutex_lock(&s->lock);
    s->requests++;
    for (json_int_t k = 0; k < n; k++) {
        const char *text = p->replies[pick(s, p)];
        completion += words(text);
        json_array_append_new(
            choices, json_pack("{s:I, s:s, s:{s:s, s:s}}", "index", k,
                               "finish_reason", "stop", "message", "role",
                               "assistant", "content", text));
    }
    pthread_mutex_unlock(&s->lock);
    const char *model = json_string_value(json_object_get(req, "model"));
    json_t *out = json_pack(
        "{s:s, s:s, s:s, s:o, s:{s:i, s:i, s:i}}", "id", "chatcmpl-scripted",
        "object", "chat.completion", "model", model ? model : "scripted",
        "choices", choices, "usage", "prompt_tokens", (int)prompt_tokens,
        "completion_tokens", (int)completion, "total_tokens",
        (int)(prompt_tokens + completion));
    json_decref(req);
    return out ? send_json(mc, 200, out) : MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **ptr)
{
    (void)version;
    sp_server *s = cls;
    struct conn *c = *ptr;
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return MHD_NO;
        *ptr = c;
        return MHD_YES;
    }
    if (*size) {
        if (c->too_large || *size > SP_MAX_BODY - c->body.len)
            c->too_large = 1;
        else if (kg_dynbuf_put(&c->body, data, *size))
            return MHD_NO;
        *size = 0;
        return MHD_YES;
    }
    char path[256];
    snprintf(path, sizeof path, "%s", url);
    for (size_t l = strlen(path); l > 1 && path[l - 1] == '/'; l--)
        path[l - 1] = 0;
    int models = !strcmp(path, "/v1/models") || !strcmp(path, "/models");
    int chats = !strcmp(path, "/v1/chat/completions") ||
                !strcmp(path, "/chat/completions");
    if (models && !strcmp(method, "GET"))
        return send_json(mc, 200,
                         json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "object",
                                   "list", "data", "id", "scripted", "object",
                                   "model", "owned_by", "kgym"));
    if (chats && !strcmp(method, "POST")) {
        if (c->too_large)
            return send_error(mc, 413, "the request body is over 64 MiB");
        return chat(s, mc, c);
    }
    if (models || chats)
        return send_error(mc, 405, "method not allowed");
    return send_error(mc, 404,
                      "not found (POST /v1/chat/completions, GET /v1/models)");
}

static void on_done(void *cls, struct MHD_Connection *mc, void **ptr,
                    enum MHD_RequestTerminationCode why)
{
    (void)cls, (void)mc, (void)why;
    struct conn *c = *ptr;
    if (c)
        kg_dynbuf_free(&c->body);
    free(c);
    *ptr = NULL;
}

/* --- the command ------------------------------------------------------ */

static void server_free(sp_server *s)
{
    for (int i = 0; i < s->n; i++) {
        for (int k = 0; k < s->p[i].n; k++)
            free(s->p[i].replies[k]);
        free(s->p[i].replies);
        free(s->p[i].name);
    }
    free(s->p);
    kg_problems_free(&s->refs);
}

/* What kgym policy scripted was asked (besides s's --pick and --seed). */
struct popts {
    const char *dir, *host, *problems;
    int port;
    sp_server *s;
};

static int set_dir(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct popts *o = ctx;
    (void)name;
    if (o->dir)
        return kg_errf(err, KG_EINVAL, "%s: unexpected argument (one DIR)", v);
    o->dir = v;
    return 0;
}

static int set_pick(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct popts *o = ctx;
    (void)name;
    if (strcmp(v, "cycle") && strcmp(v, "random"))
        return kg_errf(err, KG_EINVAL, "--pick: cycle or random, got '%s'", v);
    o->s->random = !strcmp(v, "random");
    return 0;
}

/* --seed: any 64-bit unsigned integer (more than a double holds). */
static int set_seed(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct popts *o = ctx;
    char *end;
    (void)name;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || end == v || *v == '-')
        return kg_errf(err, KG_EINVAL,
                       "--seed: expected a non-negative integer, got '%s'", v);
    o->s->rng = x;
    return 0;
}

static int scripted(int argc, char **argv)
{
    sp_server s = {0};
    struct popts o = {.host = "127.0.0.1", .port = 8100, .s = &s};
    const kg_opt table[] = {
        KG_OPT_S("--host", &o.host),
        KG_OPT_I("--port", &o.port, 0, 65535),
        KG_OPT_S("--problems", &o.problems),
        KG_OPT_FN("--pick", set_pick),
        KG_OPT_FN("--seed", set_seed),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table,
                    .ctx = &o,
                    .positional = set_dir,
                    .hint = " (kgym policy scripted --help)"};
    int rc = kg_opts_main(&spec, argc, argv, usage);
    if (rc >= 0)
        return rc;
    const char *dir = o.dir, *host = o.host, *problems = o.problems;
    long port = o.port;
    if (!dir) {
        kg_error("a DIR of replies is needed (kgym policy scripted --help)");
        return 2;
    }
    /* xorshift needs a nonzero state: the seed is mixed with a constant */
    s.rng = (s.rng + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    if (!s.rng)
        s.rng = 1;
    kg_err err = {{0}};
    rc = load_dir(&s, dir, &err);
    if (!rc) {
        char root[PATH_MAX];
        snprintf(root, sizeof root, "%s", dir);
        rc = read_replies(&s, root, &err);
    }
    if (!rc && problems)
        rc = kg_problems_load(&s.refs, problems, &err);
    if (rc) {
        kg_error("%s", err.msg);
        server_free(&s);
        return 2;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        kg_error("--host: expected an IPv4 address, got '%s'", host);
        server_free(&s);
        return 2;
    }
    pthread_mutex_init(&s.lock, NULL);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, on_request, &s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    if (!d) {
        kg_error("cannot listen on %s:%ld (address in use, or not "
                 "permitted)",
                 host, port);
        server_free(&s);
        return 1;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int files = 0;
    for (int i = 0; i < s.n; i++)
        files += s.p[i].n;
    kg_info("%d problem(s), %d repl%s from %s%s%s; --pick %s", s.n, files,
            files == 1 ? "y" : "ies", dir, problems ? "; references from " : "",
            problems ? problems : "", s.random ? "random" : "cycle");
    printf("http://%s:%d/v1\n", host, di ? di->port : (int)port);
    fflush(stdout);
    struct sigaction act = {.sa_handler = on_signal};
    sigaction(SIGINT, &act, NULL);
    sigaction(SIGTERM, &act, NULL);
    while (!stop_sig)
        pause();
    MHD_stop_daemon(d);
    kg_info("stopped after %lu chat request(s)", s.requests);
    pthread_mutex_destroy(&s.lock);
    server_free(&s);
    return 0;
}

int kg_cli_policy(int argc, char **argv)
{
    kg_log_init("kgym policy", NULL, 0);
    if (argc >= 2 && !strcmp(argv[1], "scripted"))
        return scripted(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    kg_error("usage: kgym policy scripted DIR [options] (kgym policy "
             "scripted --help)");
    return 2;
}
