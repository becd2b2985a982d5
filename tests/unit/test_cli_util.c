/* test_cli_util.c - helpers the kgym subcommands share (src/cli/cli_util.c):
 * the engine's options as shared option-table entries, --concurrency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cli_util.h"

/* Parses argv (NULL-ended, argv[0] a command name) through the engine's
 * shared table entries into cfg. */
static int parse(kg_engine_cfg *cfg, char **argv, kg_err *err)
{
    const kg_opt table[] = {
        KG_CLI_ENGINE_SWITCHES(cfg),
        KG_CLI_ENGINE_KNOBS(cfg),
        KG_CLI_ENGINE_LOCAL(cfg),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table};
    int argc = 0;
    while (argv[argc])
        argc++;
    return kg_opts_parse(&spec, argc, argv, err);
}

static void test_engine_flags_set_their_field(void **state)
{
    (void)state;
    kg_engine_cfg cfg;
    kg_err err = {{0}};
    memset(&cfg, 0, sizeof cfg);
    char *fresh[] = {"x", "--fresh", NULL};
    assert_int_equal(parse(&cfg, fresh, &err), 0);
    assert_int_equal(cfg.fresh, 1);
    assert_int_equal(cfg.no_sandbox + cfg.no_cgroups + cfg.verbose, 0);
    char *rest[] = {"x", "--no-sandbox", "--no-cgroups", "--verbose", NULL};
    assert_int_equal(parse(&cfg, rest, &err), 0);
    assert_int_equal(cfg.no_sandbox + cfg.no_cgroups + cfg.verbose, 3);
}

static void test_other_arguments_are_not_engine_flags(void **state)
{
    (void)state;
    kg_engine_cfg cfg;
    kg_err err = {{0}};
    memset(&cfg, 0, sizeof cfg);
    const char *others[] = {"--ref", "--fresh=1", "--no-sandboxes", "fresh", "-v"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char *argv[] = {"x", (char *)others[i], NULL};
        assert_int_not_equal(parse(&cfg, argv, &err), 0);
    }
    assert_int_equal(cfg.fresh + cfg.no_sandbox + cfg.no_cgroups + cfg.verbose, 0);
}

/* The knobs, the counts and the device through the same entries: a knob's
 * own message, the counts' range (--prewarm 0: none, -1). */
static void test_engine_values_through_the_table(void **state)
{
    (void)state;
    kg_engine_cfg cfg;
    kg_err err = {{0}};
    memset(&cfg, 0, sizeof cfg);
    char *good[] = {"x", "--cpu-threads", "3", "--compile-ahead=off",
                    "--prewarm", "0", "--stage", "2", "--concurrency", "5",
                    "--device", "cpu", "--python", "py", NULL};
    assert_int_equal(parse(&cfg, good, &err), 0);
    assert_int_equal(cfg.cpu_threads, 3);
    assert_int_equal(cfg.compile_ahead, KG_AHEAD_OFF);
    assert_int_equal(cfg.prewarm, -1);
    assert_int_equal(cfg.stage, 2);
    assert_int_equal(cfg.concurrency, 5);
    assert_string_equal(cfg.device, "cpu");
    assert_string_equal(cfg.python, "py");
    char *knob[] = {"x", "--cpu-threads", "0", NULL};
    assert_int_equal(parse(&cfg, knob, &err), KG_EINVAL);
    assert_string_equal(err.msg, "--cpu-threads must be a number from 1 to "
                                 "1024, or auto, not '0'");
    char *count[] = {"x", "--stage", "33", NULL};
    assert_int_equal(parse(&cfg, count, &err), KG_EINVAL);
    assert_string_equal(err.msg, "--stage: a number from 0 to 32, not '33'");
    char *conc[] = {"x", "--concurrency", "65", NULL};
    assert_int_equal(parse(&cfg, conc, &err), KG_EINVAL);
    assert_int_equal(cfg.stage, 2);
}

/* --concurrency auto: 4 on a GPU; on the CPU the CPUs / (2 x workers),
 * 1 to 8; numbers 1..64 as given; anything else a one-line error. */
static void test_concurrency_values(void **state)
{
    (void)state;
    assert_int_equal(kg_cli_auto_concurrency("cuda:0", 1), 4);
    assert_int_equal(kg_cli_auto_concurrency("cuda:3", 8), 4);
    int one = kg_cli_auto_concurrency("cpu", 1);
    assert_true(one >= 1 && one <= 8);
    assert_int_equal(kg_cli_auto_concurrency("cpu:0", 1000), 1);
    assert_true(kg_cli_auto_concurrency("cpu", 2) <= one);
    long v = 0;
    kg_err err = {{0}};
    assert_int_equal(kg_cli_concurrency("--concurrency", "auto", "cuda:0", 1, &v, &err), 0);
    assert_int_equal(v, 4);
    assert_int_equal(kg_cli_concurrency("--concurrency", "64", "cpu", 1, &v, &err), 0);
    assert_int_equal(v, 64);
    const char *bad[] = {"0", "65", "-1", "4x", "", "Auto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_not_equal(
            kg_cli_concurrency("--concurrency", bad[i], "cpu", 1, &v, &err), 0);
        assert_non_null(strstr(err.msg, "must be a number from 1 to 64, or auto"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_flags_set_their_field),
        cmocka_unit_test(test_other_arguments_are_not_engine_flags),
        cmocka_unit_test(test_engine_values_through_the_table),
        cmocka_unit_test(test_concurrency_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
