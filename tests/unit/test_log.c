/* test_log.c - kgym's one logging helper (src/common/log.c): the prefix,
 * the levels, long lines, and KGYM_LOG_LEVEL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"

#define LINE_MAX_OUT 2047 /* log.c's line buffer less its NUL */

static char out[8192];
static FILE *cap;
static int saved_fd = -1;

/* From here to captured(), what is written on stderr goes to a file. */
static void capture(void)
{
    fflush(stderr);
    saved_fd = dup(2);
    cap = tmpfile();
    assert_true(saved_fd >= 0 && cap);
    assert_true(dup2(fileno(cap), 2) == 2);
}

/* What was written on stderr since capture(); stderr is restored (before
 * any assertion, so that cmocka's messages are seen). */
static const char *captured(void)
{
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    rewind(cap);
    size_t n = fread(out, 1, sizeof out - 1, cap);
    out[n] = 0;
    fclose(cap);
    return out;
}

static void test_prefix(void **state)
{
    (void)state;
    unsetenv("KGYM_LOG_LEVEL");
    kg_log_init("kgym test", "host-cpu-7", 0);
    capture();
    kg_info("task %s: leased (attempt %d)", "t1", 2);
    assert_string_equal(captured(),
                        "kgym test host-cpu-7: task t1: leased (attempt 2)\n");

    /* no who; the message as given (no level word added) */
    kg_log_init("kgym eval", NULL, 0);
    capture();
    kg_error("--cand %s: not found", "c.py");
    kg_warn("warning: %d", 1);
    assert_string_equal(captured(), "kgym eval: --cand c.py: not found\n"
                                    "kgym eval: warning: 1\n");

    /* timestamps: "YYYY-MM-DDTHH:MM:SS " before the program */
    kg_log_init("kgym serve", "", 1);
    capture();
    kg_info("tokens reloaded");
    const char *s = captured();
    assert_int_equal(strlen(s), 20 + strlen("kgym serve: tokens reloaded\n"));
    for (int i = 0; i < 19; i++) {
        if (i == 4 || i == 7)
            assert_int_equal(s[i], '-');
        else if (i == 10)
            assert_int_equal(s[i], 'T');
        else if (i == 13 || i == 16)
            assert_int_equal(s[i], ':');
        else
            assert_true(s[i] >= '0' && s[i] <= '9');
    }
    assert_int_equal(s[19], ' ');
    assert_string_equal(s + 20, "kgym serve: tokens reloaded\n");

    /* the strings are copied */
    char prog[16] = "kgym rl", who[16] = "reward";
    kg_log_init(prog, who, 0);
    strcpy(prog, "changed");
    strcpy(who, "changed");
    capture();
    kg_error("x");
    assert_string_equal(captured(), "kgym rl reward: x\n");
}

/* Writes one line at each level. */
static void one_of_each(void)
{
    kg_debug("d");
    kg_info("i");
    kg_warn("w");
    kg_error("e");
}

static void test_levels(void **state)
{
    (void)state;
    unsetenv("KGYM_LOG_LEVEL");
    kg_log_init("p", NULL, 0); /* default: info */
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: i\np: w\np: e\n");
    assert_false(kg_log_enabled(KG_LOG_DEBUG));
    assert_true(kg_log_enabled(KG_LOG_INFO));

    kg_log_level(KG_LOG_WARN);
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: w\np: e\n");

    kg_log_level(KG_LOG_ERROR);
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: e\n");
    assert_false(kg_log_enabled(KG_LOG_WARN));
    assert_true(kg_log_enabled(KG_LOG_ERROR));

    kg_log_level(KG_LOG_DEBUG); /* --verbose */
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: d\np: i\np: w\np: e\n");

    /* out of range: clamped */
    kg_log_level(99);
    assert_true(kg_log_enabled(KG_LOG_DEBUG));
    kg_log_level(-5);
    assert_false(kg_log_enabled(KG_LOG_WARN));
    assert_true(kg_log_enabled(KG_LOG_ERROR));
}

/* The line kg_info("%s", msg) writes: one full-length line, checked. */
static const char *full_line(const char *msg)
{
    capture();
    kg_info("%s", msg);
    const char *s = captured();
    assert_int_equal(strlen(s), LINE_MAX_OUT);
    assert_int_equal(s[LINE_MAX_OUT - 1], '\n');
    return s;
}

static void test_long_message(void **state)
{
    (void)state;
    static char msg[5000];
    unsetenv("KGYM_LOG_LEVEL");
    kg_log_init("p", NULL, 0);

    /* far too long: cut, still one line ending in its newline */
    memset(msg, 'a', sizeof msg - 1);
    capture();
    kg_error("%s", msg);
    kg_error("next");
    const char *s = captured();
    const char *nl = strchr(s, '\n');
    assert_non_null(nl);
    assert_int_equal(nl - s + 1, LINE_MAX_OUT);
    assert_memory_equal(s, "p: aaaa", 7);
    assert_int_equal(strspn(s + 3, "a"), LINE_MAX_OUT - 4);
    assert_string_equal(nl + 1, "p: next\n");

    /* exactly fits: nothing cut */
    size_t fit = LINE_MAX_OUT - 1 - 3; /* less "p: " and the newline */
    msg[fit] = 0;
    assert_int_equal(strspn(full_line(msg) + 3, "a"), fit);

    /* one more: its last character gives way to the newline */
    msg[fit] = 'a';
    msg[fit + 1] = 0;
    assert_int_equal(strspn(full_line(msg) + 3, "a"), fit);

    /* a long prefix is cut too, and the line still ends */
    char who[128];
    memset(who, 'w', sizeof who - 1);
    who[sizeof who - 1] = 0;
    kg_log_init("kgym worker", who, 1);
    assert_non_null(strstr(full_line(msg), "kgym worker www"));
}

static void test_level_from_environment(void **state)
{
    (void)state;
    setenv("KGYM_LOG_LEVEL", "debug", 1);
    kg_log_init("p", NULL, 0);
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: d\np: i\np: w\np: e\n");

    setenv("KGYM_LOG_LEVEL", "warn", 1);
    kg_log_init("p", NULL, 0);
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: w\np: e\n");

    setenv("KGYM_LOG_LEVEL", "error", 1);
    kg_log_init("p", NULL, 0);
    /* read at init only */
    setenv("KGYM_LOG_LEVEL", "debug", 1);
    capture();
    one_of_each();
    assert_string_equal(captured(), "p: e\n");

    /* a flag (--verbose) wins over the environment */
    setenv("KGYM_LOG_LEVEL", "error", 1);
    kg_log_init("p", NULL, 0);
    kg_log_level(KG_LOG_DEBUG);
    assert_true(kg_log_enabled(KG_LOG_DEBUG));

    /* unknown or empty: the default, info */
    const char *bad[] = {"bogus", "", "DEBUG", "4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("KGYM_LOG_LEVEL", bad[i], 1);
        kg_log_init("p", NULL, 0);
        capture();
        one_of_each();
        assert_string_equal(captured(), "p: i\np: w\np: e\n");
    }
    unsetenv("KGYM_LOG_LEVEL");
    kg_log_init("p", NULL, 0);
    assert_true(kg_log_enabled(KG_LOG_INFO));
    assert_false(kg_log_enabled(KG_LOG_DEBUG));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_long_message),
        cmocka_unit_test(test_level_from_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
