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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_flags_set_their_field),
        cmocka_unit_test(test_other_arguments_are_not_engine_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
