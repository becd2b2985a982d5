/* test_dynbuf.c - the growable byte buffer (kgym/dynbuf.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kgym/dynbuf.h"

static void test_put_grows_and_terminates(void **state)
{
    (void)state;
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    assert_null(b.p);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(kg_dynbuf_put(&b, "abc", 3), 0);
    assert_int_equal(b.len, 3000);
    assert_true(b.cap > b.len);
    assert_int_equal(b.p[b.len], '\0');
    assert_memory_equal(b.p + 2997, "abc", 3);
    size_t n;
    char *t = kg_dynbuf_take(&b, &n);
    assert_int_equal(n, 3000);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    free(t);
}

static void test_printf_long_and_short(void **state)
{
    (void)state;
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    assert_int_equal(kg_dynbuf_printf(&b, "%d-%s", 42, "x"), 0);
    char big[1000];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(kg_dynbuf_printf(&b, "[%s]", big), 0);
    assert_int_equal(b.len, 4 + 2 + 999);
    assert_memory_equal(b.p, "42-x[y", 6);
    assert_int_equal(b.p[b.len - 1], ']');
    kg_dynbuf_free(&b);
    assert_null(b.p);
}

/* Past max: failed sticks, the content stays, take gives NULL. */
static void test_cap_fails_and_sticks(void **state)
{
    (void)state;
    kg_dynbuf b;
    kg_dynbuf_init(&b, 10);
    assert_int_equal(kg_dynbuf_puts(&b, "0123456789"), 0);
    assert_int_equal(kg_dynbuf_put(&b, "x", 1), -1);
    assert_true(b.failed);
    assert_int_equal(b.len, 10);
    assert_int_equal(kg_dynbuf_put(&b, "", 0), -1);
    assert_null(kg_dynbuf_take(&b, NULL));
    assert_false(b.failed);
    assert_int_equal(b.max, 10);
}

static void test_take_of_nothing_is_empty_text(void **state)
{
    (void)state;
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    size_t n = 7;
    char *t = kg_dynbuf_take(&b, &n);
    assert_non_null(t);
    assert_string_equal(t, "");
    assert_int_equal(n, 0);
    free(t);
    assert_int_equal(kg_dynbuf_reserve(&b, SIZE_MAX), -1);
    assert_true(b.failed);
    kg_dynbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_grows_and_terminates),
        cmocka_unit_test(test_printf_long_and_short),
        cmocka_unit_test(test_cap_fails_and_sticks),
        cmocka_unit_test(test_take_of_nothing_is_empty_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
