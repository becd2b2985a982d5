/* test_cli_util.c - helpers the kgym subcommands share (src/cli/cli_util.c):
 * the engine's on/off flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cli_util.h"

static void test_engine_flags_set_their_field(void **state)
{
    (void)state;
    kg_engine_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    assert_int_equal(kg_cli_engine_flag(&cfg, "--fresh"), 1);
    assert_int_equal(cfg.fresh, 1);
    assert_int_equal(cfg.no_sandbox + cfg.no_cgroups + cfg.verbose, 0);
    assert_int_equal(kg_cli_engine_flag(&cfg, "--no-sandbox"), 1);
    assert_int_equal(cfg.no_sandbox, 1);
    assert_int_equal(kg_cli_engine_flag(&cfg, "--no-cgroups"), 1);
    assert_int_equal(cfg.no_cgroups, 1);
    assert_int_equal(kg_cli_engine_flag(&cfg, "--verbose"), 1);
    assert_int_equal(cfg.verbose, 1);
}

static void test_other_arguments_are_not_engine_flags(void **state)
{
    (void)state;
    kg_engine_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    const char *others[] = {"--ref", "--fresh=1", "--no-sandboxes", "fresh", "-v", ""};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        assert_int_equal(kg_cli_engine_flag(&cfg, others[i]), 0);
    assert_int_equal(cfg.fresh + cfg.no_sandbox + cfg.no_cgroups + cfg.verbose, 0);
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
        cmocka_unit_test(test_concurrency_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
