/* test_engine_knobs.c - the engine's tuning knobs (engine.h: cpu_threads,
 * compile_ahead, spare_mem_floor): their flags and old environment
 * variables as the commands read them (src/cli/cli_util.c), the engine's
 * own check of a config, and what the knobs and the device lock become in
 * a child's environment and its judge's task (engine_env.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/cli_util.h"
#include "worker/engine_impl.h"

static const char *const envs[] = {"KGYM_CPU_THREADS", "KGYM_COMPILE_AHEAD",
                                   "KGYM_SPARE_MEM_FLOOR"};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof envs / sizeof *envs; i++)
        unsetenv(envs[i]);
    return 0;
}

static kg_engine_cfg zero_cfg(void)
{
    kg_engine_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    return cfg;
}

/* ---- flags -------------------------------------------------------------- */

static void test_knob_flags_set_their_field(void **state)
{
    (void)state;
    kg_engine_cfg cfg = zero_cfg();
    kg_err err = {{0}};
    assert_int_equal(kg_cli_engine_knob(&cfg, "--cpu-threads", "4", &err), 1);
    assert_int_equal(cfg.cpu_threads, 4);
    assert_int_equal(kg_cli_engine_knob(&cfg, "--cpu-threads", "1024", &err),
                     1);
    assert_int_equal(cfg.cpu_threads, 1024);
    assert_int_equal(kg_cli_engine_knob(&cfg, "--cpu-threads", "auto", &err),
                     1);
    assert_int_equal(cfg.cpu_threads, 0);
    const struct {
        const char *v;
        int want;
    } ahead[] = {{"on", KG_AHEAD_ON},
                 {"1", KG_AHEAD_ON},
                 {"off", KG_AHEAD_OFF},
                 {"0", KG_AHEAD_OFF},
                 {"auto", KG_AHEAD_AUTO}};
    for (size_t i = 0; i < sizeof ahead / sizeof *ahead; i++) {
        assert_int_equal(
            kg_cli_engine_knob(&cfg, "--compile-ahead", ahead[i].v, &err), 1);
        assert_int_equal(cfg.compile_ahead, ahead[i].want);
    }
    assert_int_equal(kg_cli_engine_knob(&cfg, "--spare-mem-floor", "0.5", &err),
                     1);
    assert_true(cfg.spare_mem_floor == 0.5);
    assert_int_equal(kg_cli_engine_knob(&cfg, "--spare-mem-floor", "1", &err),
                     1);
    assert_true(cfg.spare_mem_floor == 1);
    /* 0 is no floor: not the zeroed field, which is the default */
    assert_int_equal(kg_cli_engine_knob(&cfg, "--spare-mem-floor", "0", &err),
                     1);
    assert_true(cfg.spare_mem_floor < 0);
    assert_true(eng_mem_floor(&cfg) == 0);
}

static void test_bad_knob_values_are_refused_in_one_line(void **state)
{
    (void)state;
    const struct {
        const char *flag, *v;
    } bad[] = {
        {"--cpu-threads", "0"},        {"--cpu-threads", "-2"},
        {"--cpu-threads", "1025"},     {"--cpu-threads", "4x"},
        {"--cpu-threads", ""},         {"--cpu-threads", "AUTO"},
        {"--compile-ahead", "yes"},    {"--compile-ahead", "ON"},
        {"--compile-ahead", ""},       {"--compile-ahead", "2"},
        {"--spare-mem-floor", "1.5"},  {"--spare-mem-floor", "-0.1"},
        {"--spare-mem-floor", "nan"},  {"--spare-mem-floor", "inf"},
        {"--spare-mem-floor", "0.3x"}, {"--spare-mem-floor", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kg_engine_cfg cfg = zero_cfg();
        kg_err err = {{0}};
        assert_int_equal(kg_cli_engine_knob(&cfg, bad[i].flag, bad[i].v, &err),
                         KG_EINVAL);
        char want[80];
        snprintf(want, sizeof want, "%s must be ", bad[i].flag);
        assert_non_null(strstr(err.msg, want));
        snprintf(want, sizeof want, ", not '%s'", bad[i].v);
        assert_non_null(strstr(err.msg, want));
        assert_null(strchr(err.msg, '\n'));
        /* nothing set */
        assert_int_equal(cfg.cpu_threads + cfg.compile_ahead, 0);
        assert_true(cfg.spare_mem_floor == 0);
    }
    kg_engine_cfg cfg = zero_cfg();
    kg_err err = {{0}};
    assert_int_equal(kg_cli_engine_knob(&cfg, "--cpu-threads", NULL, &err),
                     KG_EINVAL);
}

static void test_other_flags_are_not_knobs(void **state)
{
    (void)state;
    kg_engine_cfg cfg = zero_cfg();
    kg_err err = {{0}};
    const char *others[] = {"--cpu-thread",  "--cpu-threads=4", "--device",
                            "--concurrency", "cpu-threads",     ""};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        assert_int_equal(kg_cli_engine_knob(&cfg, others[i], "4", &err), 0);
    assert_int_equal(cfg.cpu_threads, 0);
}

/* ---- the old variables, a fallback ------------------------------------ */

static void test_env_is_the_fallback_and_flags_win(void **state)
{
    (void)state;
    kg_engine_cfg cfg = zero_cfg();
    setenv("KGYM_CPU_THREADS", "3", 1);
    setenv("KGYM_COMPILE_AHEAD", "1", 1);
    setenv("KGYM_SPARE_MEM_FLOOR", "0", 1);
    kg_cli_engine_knobs_env(&cfg);
    assert_int_equal(cfg.cpu_threads, 3);
    assert_int_equal(cfg.compile_ahead, KG_AHEAD_ON);
    assert_true(cfg.spare_mem_floor < 0);
    kg_err err = {{0}};
    assert_int_equal(kg_cli_engine_knob(&cfg, "--cpu-threads", "5", &err), 1);
    assert_int_equal(kg_cli_engine_knob(&cfg, "--compile-ahead", "off", &err),
                     1);
    assert_int_equal(cfg.cpu_threads, 5);
    assert_int_equal(cfg.compile_ahead, KG_AHEAD_OFF);
}

static void test_bad_env_values_leave_the_default(void **state)
{
    (void)state;
    kg_engine_cfg cfg = zero_cfg();
    setenv("KGYM_CPU_THREADS", "abc", 1);
    setenv("KGYM_COMPILE_AHEAD", "yes", 1);
    setenv("KGYM_SPARE_MEM_FLOOR", "1.5", 1); /* not read as 0 */
    kg_cli_engine_knobs_env(&cfg);
    assert_int_equal(cfg.cpu_threads, 0);
    assert_int_equal(cfg.compile_ahead, KG_AHEAD_AUTO);
    assert_true(cfg.spare_mem_floor == 0);
    assert_true(eng_mem_floor(&cfg) == KG_ENGINE_MEM_FLOOR);
    setenv("KGYM_CPU_THREADS", "", 1); /* empty: unset */
    kg_cli_engine_knobs_env(&cfg);
    assert_int_equal(cfg.cpu_threads, 0);
}

/* ---- the engine's check -------------------------------------------- */

static void test_engine_refuses_knobs_out_of_range(void **state)
{
    (void)state;
    kg_err err = {{0}};
    kg_engine_cfg cfg = zero_cfg();
    assert_int_equal(eng_check_knobs(&cfg, &err), 0);
    cfg.cpu_threads = KG_ENGINE_MAX_CPU_THREADS;
    cfg.compile_ahead = KG_AHEAD_OFF;
    cfg.spare_mem_floor = 1;
    assert_int_equal(eng_check_knobs(&cfg, &err), 0);
    kg_engine_cfg bad[5];
    for (int i = 0; i < 5; i++)
        bad[i] = zero_cfg();
    bad[0].cpu_threads = -1;
    bad[1].cpu_threads = KG_ENGINE_MAX_CPU_THREADS + 1;
    bad[2].compile_ahead = 3;
    bad[3].spare_mem_floor = 1.5;
    bad[4].spare_mem_floor = NAN;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(eng_check_knobs(&bad[i], &err), KG_EINVAL);
        /* kg_engine_new checks before it starts anything */
        bad[i].device = "cpu";
        kg_engine *e = (kg_engine *)&err; /* must stay untouched */
        assert_int_equal(kg_engine_new(&e, &bad[i], &err), KG_EINVAL);
        assert_ptr_equal(e, (kg_engine *)&err);
    }
}

static void test_mem_floor_default_and_none(void **state)
{
    (void)state;
    kg_engine_cfg cfg = zero_cfg();
    assert_true(eng_mem_floor(&cfg) == KG_ENGINE_MEM_FLOOR);
    cfg.spare_mem_floor = -1;
    assert_true(eng_mem_floor(&cfg) == 0);
    cfg.spare_mem_floor = 0.6;
    assert_true(eng_mem_floor(&cfg) == 0.6);
}

/* ---- what the children get --------------------------------------------- */

/* An engine with no process behind it: enough for engine_env.c. */
static kg_engine *fake_engine(const char *device, int concurrency)
{
    kg_engine *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->cfg.device = device;
    e->cfg.concurrency = concurrency;
    if (!strncmp(device, "cuda:", 5))
        snprintf(e->cuda_env, sizeof e->cuda_env, "%s", device + 5);
    snprintf(e->cache_dir, sizeof e->cache_dir, "/tmp/x/kgym-cache");
    snprintf(e->pythonpath, sizeof e->pythonpath, "/x/harness");
    snprintf(e->lock_path, sizeof e->lock_path, "/tmp/x/kgym-device-%s.lock",
             device);
    return e;
}

static void test_cpu_threads_reach_both_children(void **state)
{
    (void)state;
    kg_engine *e = fake_engine("cpu", 1);
    struct child c;
    memset(&c, 0, sizeof c);
    snprintf(c.wd, sizeof c.wd, "/tmp/x/wd");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int dflt = ncpu / 2 > 0 ? (int)(ncpu / 2) : 1;
    assert_int_equal(eng_cpu_threads(e), dflt);
    e->cfg.cpu_threads = 7;
    assert_int_equal(eng_cpu_threads(e), 7);
    const char *roles[] = {"judge", "candidate"};
    for (int i = 0; i < 2; i++) {
        json_t *env = eng_child_env(e, roles[i], &c, 0, 0);
        assert_string_equal(
            json_string_value(json_object_get(env, "KGYM_CPU_THREADS")), "7");
        /* the lock is not in any child's environment */
        assert_null(json_object_get(env, "KGYM_DEVICE_LOCK"));
        json_decref(env);
    }
    free(e);
}

static void test_compile_ahead_follows_the_config(void **state)
{
    (void)state;
    kg_engine *e = fake_engine("cuda:0", 2);
    assert_string_equal(eng_compile_ahead(e), "1"); /* auto: GPU, 2 at once */
    e->cfg.compile_ahead = KG_AHEAD_OFF;
    assert_string_equal(eng_compile_ahead(e), "0");
    e->cfg.concurrency = 1;
    e->cfg.compile_ahead = KG_AHEAD_AUTO;
    assert_string_equal(eng_compile_ahead(e), "0"); /* auto: one at a time */
    e->cfg.stage = 2;
    assert_string_equal(eng_compile_ahead(e), "1");
    free(e);
    e = fake_engine("cpu", 4);
    assert_string_equal(eng_compile_ahead(e), "0"); /* auto: no GPU */
    e->cfg.compile_ahead = KG_AHEAD_ON;
    assert_string_equal(eng_compile_ahead(e), "1");
    struct child c;
    memset(&c, 0, sizeof c);
    json_t *env = eng_child_env(e, "judge", &c, 0, 0);
    assert_string_equal(
        json_string_value(json_object_get(env, "KGYM_COMPILE_AHEAD")), "1");
    json_decref(env);
    env = eng_child_env(e, "candidate", &c, 0, 0);
    assert_null(json_object_get(env, "KGYM_COMPILE_AHEAD"));
    json_decref(env);
    free(e);
}

/* The device lock reaches a judge once: in the task of a judge forked with
 * it; not in the task a warm spare gets later (its start message named the
 * lock, engine_spawn.c). */
static void test_device_lock_is_in_the_task_only_without_a_spare(void **state)
{
    (void)state;
    kg_engine *e = fake_engine("cpu", 1);
    struct slot sl;
    slot_clear(&sl);
    slot_set_state(&sl, S_RUNNING);
    sl.task = json_pack("{s:s, s:s}", "task_id", "t1", "device_lock", "/evil");
    sl.deadline = 1e12;
    json_t *t = eng_judge_task(e, &sl);
    assert_string_equal(json_string_value(json_object_get(t, "device_lock")),
                        e->lock_path);
    json_decref(t);
    sl.warm = 1;
    t = eng_judge_task(e, &sl);
    assert_null(json_object_get(t, "device_lock"));
    assert_string_equal(json_string_value(json_object_get(t, "task_id")), "t1");
    json_decref(t);
    json_decref(sl.task);
    free(e);
}

/* ---- the candidate's own root -------------------------------------------- */

static void test_new_root_is_on_unless_turned_off(void **state)
{
    (void)state;
    assert_int_equal(eng_wants_new_root(NULL), 1); /* any device */
    assert_int_equal(eng_wants_new_root("1"), 1);
    assert_int_equal(eng_wants_new_root(""), 1);
    assert_int_equal(eng_wants_new_root("0"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_knob_flags_set_their_field, clear_env),
        cmocka_unit_test_setup(test_bad_knob_values_are_refused_in_one_line,
                               clear_env),
        cmocka_unit_test_setup(test_other_flags_are_not_knobs, clear_env),
        cmocka_unit_test_setup(test_env_is_the_fallback_and_flags_win,
                               clear_env),
        cmocka_unit_test_setup(test_bad_env_values_leave_the_default,
                               clear_env),
        cmocka_unit_test_setup(test_engine_refuses_knobs_out_of_range,
                               clear_env),
        cmocka_unit_test(test_mem_floor_default_and_none),
        cmocka_unit_test_setup(test_cpu_threads_reach_both_children, clear_env),
        cmocka_unit_test(test_compile_ahead_follows_the_config),
        cmocka_unit_test(test_device_lock_is_in_the_task_only_without_a_spare),
        cmocka_unit_test(test_new_root_is_on_unless_turned_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
