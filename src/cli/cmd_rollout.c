/* cmd_rollout.c - `kgym rollout`: K samples x T turns of a policy on each
 * problem, every turn's code evaluated by `kgym serve`, one JSONL row per
 * turn with its reward, return, advantages and keep flag (docs/agent.md).
 * Exit codes: 0 done, 1 the policy or the server failed the run, 2 bad
 * usage or input, 130/143 stopped by a signal. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/prompt.h"
#include "agent/rollout.h"
#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/request.h"

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig)
{
    if (stop_sig)
        _exit(128 + sig);
    stop_sig = sig;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kgym rollout --policy URL --model NAME --problems PATH "
        "--out FILE.jsonl [options]\n"
        "\n"
        "Asks an OpenAI-compatible policy for kernels, K samples x T turns "
        "per problem;\n"
        "each turn's code is evaluated by a kgym server and its feedback "
        "goes into the\n"
        "next turn. One JSONL row per turn (docs/agent.md). A rerun with the "
        "same --out\n"
        "skips the trajectories it holds.\n"
        "\n"
        "  --policy URL          the chat endpoint's base (http://host:8000"
        "[/v1])\n"
        "  --model NAME          the model field\n"
        "  --key-file F          API key (default $KGYM_POLICY_KEY)\n"
        "  --server URL          kgym server (default $KGYM_SERVER, else " KG_CLI_DEFAULT_SERVER
        ")\n"
        "  --token-file F        its client token (default $KGYM_TOKEN_FILE)\n"
        "  --problems PATH       KernelBench tree, folder of *.py, one .py, or "
        "dataset JSONL\n"
        "  --samples K --turns T default 16 x 3\n"
        "  --context C           full (default) or window:T,R[,last|best]: "
        "restart the chat\n"
        "                        every T turns from the prompt and R earlier "
        "turns\n"
        "  --temperature X --top-p X --max-tokens N --stop S (repeatable) "
        "--seed S\n"
        "  --logprobs            ask for logprobs and token ids, keep them\n"
        "  --gamma G (1) --w-pr W (0) --cap C (3) --penalty P (0)\n"
        "  --prs-tau X (0.3) --prs-s X (0.1)\n"
        "  --policy-concurrency N (64) --policy-rate R/s (none)\n"
        "  --policy-deadline S (600) --policy-retries N (6) "
        "--policy-backoff S (1)\n"
        "  --no-group-n          turn 0: K requests of n=1, not one of n=K\n"
        "  --chunk N             problems rolled out together (8)\n"
        "  --eval-timeout S      wait at most S for a turn's results (3600)\n"
        "  --prompt-system F --prompt-first F --prompt-refine F --no-system\n"
        "  --dataset-prompt      a JSONL row's prompt is the first turn\n"
        "  --write-prompts DIR   write the default prompts there and exit\n"
        "  --FIELD VALUE         any request field: --backend cpu "
        "--num-perf-trials 20\n");
}

static int max_tokens_opt(void *ctx, const char *name, const char *v,
                          kg_err *err)
{
    ro_opts *o = ctx;
    long long n;
    int rc = kg_opts_int(name, v, 1, 1e9, &n, err);
    if (!rc)
        o->pcfg.max_tokens = (long)n;
    return rc;
}

static int seed_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    ro_opts *o = ctx;
    long long n;
    int rc = kg_opts_int(name, v, 0, 9007199254740991.0, &n, err);
    if (!rc) {
        o->seed = (uint64_t)n;
        o->has_seed = 1;
    }
    return rc;
}

static int context_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    (void)name;
    return ro_context_parse(ctx, v, err);
}

/* --stop S, repeatable: one more stop string. */
static int stop_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    ro_opts *o = ctx;
    (void)name;
    if (json_array_append_new(o->pcfg.stop, json_string(v)))
        return kg_errf(err, KG_EINVAL, "--stop: not UTF-8 text");
    return 0;
}

static int switch_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    ro_opts *o = ctx;
    (void)v, (void)err;
    if (!strcmp(name, "--no-group-n"))
        o->group_n = 0;
    else /* --verbose */
        kg_log_level(KG_LOG_DEBUG);
    return 0;
}

/* Any other --FIELD VALUE: a request field. */
static int field_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    ro_opts *o = ctx;
    return kg_request_flag(o->fields, name, v, err);
}

/* argv into o. -1 to go on, else the exit code (0: --help). */
static int parse_args(int argc, char **argv, ro_opts *o)
{
    const kg_opt table[] = {
        KG_OPT_F("--logprobs", &o->pcfg.logprobs),
        KG_OPT_FN0("--no-group-n", switch_opt),
        KG_OPT_F("--no-system", &o->no_system),
        KG_OPT_F("--dataset-prompt", &o->dataset_prompt),
        KG_OPT_FN0("--verbose", switch_opt),
        KG_OPT_S("--policy", &o->policy),
        KG_OPT_S("--model", &o->model),
        KG_OPT_S("--key-file", &o->key_file),
        KG_OPT_S("--server", &o->server),
        KG_OPT_S("--token-file", &o->token_file),
        KG_OPT_S("--problems", &o->problems),
        KG_OPT_S("--out", &o->out),
        KG_OPT_S("--write-prompts", &o->write_prompts),
        KG_OPT_S("--prompt-system", &o->prompt_system),
        KG_OPT_S("--prompt-first", &o->prompt_first),
        KG_OPT_S("--prompt-refine", &o->prompt_refine),
        KG_OPT_I("--samples", &o->samples, 1, RO_MAX_SAMPLES),
        KG_OPT_I("--turns", &o->turns, 1, RO_MAX_TURNS),
        KG_OPT_D("--temperature", &o->pcfg.temperature, 0, 100),
        KG_OPT_D("--top-p", &o->pcfg.top_p, 0, 1),
        KG_OPT_FN("--max-tokens", max_tokens_opt),
        KG_OPT_FN("--seed", seed_opt),
        KG_OPT_D("--gamma", &o->gamma, 0, 1),
        KG_OPT_D("--w-pr", &o->reward.w_pr, 0, 1e6),
        KG_OPT_D("--cap", &o->reward.cap, 0, 1e9),
        KG_OPT_D("--penalty", &o->reward.penalty, -1e6, 1e6),
        KG_OPT_D("--prs-tau", &o->prs_tau, -1e6, 1e6),
        KG_OPT_D("--prs-s", &o->prs_s, 0, 1e6),
        KG_OPT_I("--policy-concurrency", &o->pcfg.concurrency, 1, 100000),
        KG_OPT_D("--policy-rate", &o->pcfg.rate, 0, 1e6),
        KG_OPT_D("--policy-deadline", &o->pcfg.deadline_s, 0.001, 1e7),
        KG_OPT_I("--policy-retries", &o->pcfg.max_retries, 0, 1000),
        KG_OPT_D("--policy-backoff", &o->pcfg.backoff_s, 0, 3600),
        KG_OPT_I("--chunk", &o->chunk, 1, 1e6),
        KG_OPT_D("--eval-timeout", &o->eval_timeout_s, 0.001, 1e7),
        KG_OPT_FN("--context", context_opt),
        KG_OPT_FN("--stop", stop_opt),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table, .ctx = o, .other = field_opt};
    return kg_opts_main(&spec, argc, argv, usage);
}

/* Checks the request fields given as flags the way the server will. */
static int check_fields(const ro_opts *o)
{
    json_t *req = json_copy(o->fields);
    json_object_set_new(req, "reference_code", json_string("x"));
    json_object_set_new(req, "kernel_code", json_string("x"));
    kg_err err = {{0}};
    int code;
    json_t *norm = kg_request_normalize(req, &code, NULL, &err);
    json_decref(req);
    if (!norm) {
        kg_error("%s", err.msg);
        return -1;
    }
    json_decref(norm);
    if (json_object_get(o->fields, "task_id") ||
        json_object_get(o->fields, "entry_point")) {
        kg_error("--task-id and --entry-point are set per task by rollout");
        return -1;
    }
    return 0;
}

/* --write-prompts DIR: the defaults as files. */
static int write_prompts(const char *dir)
{
    const char *names[] = {"system.txt", "first.txt", "refine.txt"};
    const char *texts[] = {kg_prompt_default_system, kg_prompt_default_first,
                           kg_prompt_default_refine};
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
        kg_error("--write-prompts %s: %s", dir, strerror(errno));
        return 2;
    }
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%s\n", texts[i]) < 0 || fclose(f)) {
            kg_error("%s: %s", path, strerror(errno));
            return 2;
        }
        printf("%s\n", path);
    }
    return 0;
}

/* A template: the file's text, else the default. NULL on error (logged). */
static char *template_of(const char *path, const char *def)
{
    if (!path)
        return strdup(def);
    kg_err err = {{0}};
    char *t = kg_prompt_read_file(path, &err);
    if (!t)
        kg_error("prompt %s", err.msg);
    return t;
}

/* The policy's API key: $KGYM_POLICY_KEY, else --key-file's first token.
 * *key NULL when there is none. 0, or -1 (logged). */
static int read_key(const ro_opts *o, char **key)
{
    *key = NULL;
    const char *env = getenv("KGYM_POLICY_KEY");
    if (o->key_file) {
        kg_err err = {{0}};
        if (kg_client_read_token(o->key_file, key, &err)) {
            kg_error("--key-file %s", err.msg);
            return -1;
        }
    } else if (env && *env && !(*key = strdup(env))) {
        return -1;
    }
    return 0;
}

/* Everything before the first turn: prompts, problems, the policy and the
 * server (both checked), the --out file. The exit code on failure, else
 * -1. */
static int set_up(ro_run *r)
{
    ro_opts *o = r->o;
    kg_err err = {{0}};
    if (!(r->system = template_of(o->prompt_system, kg_prompt_default_system)) ||
        !(r->first = template_of(o->prompt_first, kg_prompt_default_first)) ||
        !(r->refine = template_of(o->prompt_refine, kg_prompt_default_refine)))
        return 2;
    if (kg_problems_load(&r->ps, o->problems, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    if (r->ps.skipped)
        kg_warn("%d problem(s) skipped, %d loaded", r->ps.skipped, r->ps.n);
    char *key;
    if (read_key(o, &key))
        return 2;
    o->pcfg.url = o->policy;
    o->pcfg.model = o->model;
    o->pcfg.key = key;
    int rc = kg_policy_new(&r->policy, &o->pcfg, &err);
    if (key)
        memset(key, 0, strlen(key));
    free(key);
    o->pcfg.key = NULL;
    if (rc || kg_cli_connect(&r->server, o->server, o->token_file, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    kg_client_set_abort(r->server, &stop_sig);
    /* the server and its token first: nothing is asked of the policy
       before the run can hand its code to the server */
    if ((rc = ro_env_health(r, &err)) ||
        (rc = kg_policy_health(r->policy, &err))) {
        kg_error("%s", err.msg);
        return rc == KG_EINVAL ? 2 : 1;
    }
    if ((rc = ro_out_open(r, &err))) {
        kg_error("%s", err.msg);
        return rc == KG_EINVAL ? 2 : 1;
    }
    return -1;
}

/* 1 when an earlier run wrote every turn of (problem p, sample s). */
static int done_before(const ro_run *r, int p, int s)
{
    uint64_t all = r->o->turns >= 64 ? ~0ull : (1ull << r->o->turns) - 1;
    return r->prior[(size_t)p * (size_t)r->o->samples + (size_t)s]
               .turns_seen == all;
}

static void run_free(ro_run *r)
{
    kg_problems_free(&r->ps);
    kg_policy_free(r->policy);
    kg_client_free(r->server);
    free(r->system), free(r->first), free(r->refine), free(r->prior);
    if (r->out)
        fclose(r->out);
    json_decref(r->o->fields);
    json_decref(r->o->pcfg.stop);
}

static void defaults(ro_opts *o)
{
    memset(o, 0, sizeof *o);
    kg_policy_cfg_default(&o->pcfg);
    kg_reward_cfg_default(&o->reward);
    o->pcfg.stop = json_array();
    o->fields = json_object();
    o->samples = 16;
    o->turns = 3;
    o->chunk = 8;
    o->group_n = 1;
    o->gamma = 1;
    o->prs_tau = 0.3;
    o->prs_s = 0.1;
    o->eval_timeout_s = 3600;
}

int kg_cli_rollout(int argc, char **argv)
{
    return ro_main(argc, argv, "kgym rollout");
}

int ro_main(int argc, char **argv, const char *program)
{
    ro_opts o;
    ro_run r = {0};
    defaults(&o);
    r.o = &o;
    r.stop = &stop_sig;
    r.program = program;
    kg_log_init(program, NULL, 0);
    int code = parse_args(argc, argv, &o);
    if (code < 0 && o.write_prompts)
        code = write_prompts(o.write_prompts);
    if (code < 0 && (!o.policy || !o.model || !o.problems || !o.out)) {
        kg_error("--policy, --model, --problems and --out are needed "
                 "(kgym rollout --help)");
        code = 2;
    }
    if (code < 0 && check_fields(&o))
        code = 2;
    if (code < 0)
        code = set_up(&r);
    if (code >= 0) {
        run_free(&r);
        return code;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    snprintf(r.run_id, sizeof r.run_id, "ro%llx-%x",
             (unsigned long long)kg_now_ms(), (unsigned)getpid());
    r.st.t0_ms = kg_now_ms();
    r.st.tty = isatty(2);
    r.st.traj_total = (long)r.ps.n * o.samples;
    for (int p = 0; p < r.ps.n; p++)
        for (int s = 0; s < o.samples; s++)
            r.st.traj_done += done_before(&r, p, s);
    if (r.st.traj_done)
        kg_info("--out %s holds %ld of %ld trajectories: skipping them", o.out,
                r.st.traj_done, r.st.traj_total);
    code = ro_run_all(&r);
    ro_progress_end(&r);
    kg_info("%s: %ld/%ld trajectories in %s; %ld evaluations, pass %ld, "
            "hacked %ld, no code %ld, policy failures %ld (%.1f s; in policy "
            "calls %.1f s, in server calls %.1f s)",
            code ? "stopped" : "done", r.st.traj_done, r.st.traj_total, o.out,
            r.st.evals_done, r.st.pass, r.st.hacked, r.st.no_code,
            r.st.policy_failed, (kg_now_ms() - r.st.t0_ms) / 1e3,
            r.st.policy_ms / 1e3, r.st.env_ms / 1e3);
    run_free(&r);
    return code;
}
