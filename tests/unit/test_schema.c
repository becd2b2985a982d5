/* test_schema.c - libkgym's one schema (kgym/schema.h): the request's
 * fields, verdicts, hack reasons and error codes, and its JSON form, which
 * the Python side reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/request.h"
#include "kgym/schema.h"
#include "server/store.h"

static void test_find_and_types(void **state)
{
    (void)state;
    const kg_field *f = kg_schema_find("num_perf_trials");
    assert_non_null(f);
    assert_int_equal(f->type, KG_FIELD_INT);
    assert_true(f->has_def);
    assert_true(f->def_num == 100 && f->lo == 1 && f->hi == 10000);
    assert_null(kg_schema_find("no_such_field"));
    assert_null(kg_schema_find(NULL));
    assert_int_equal(kg_schema_find("kernel_code")->hi, KG_MAX_KERNEL_CODE);
    assert_true(kg_schema_find("atol")->has_strict_def);
    assert_string_equal(kg_schema_type_name(KG_FIELD_ENUM), "enum");
}

/* The request layer takes its defaults from the schema, the strict ones
 * included. */
static void test_request_defaults_come_from_schema(void **state)
{
    (void)state;
    json_t *in = json_pack("{s:s, s:s, s:b}", "reference_code", "r",
                           "kernel_code", "k", "strict", 1);
    kg_err err;
    int code;
    json_t *out = kg_request_normalize(in, &code, NULL, &err);
    assert_non_null(out);
    for (size_t i = 0; i < kg_schema_nfields(); i++) {
        const kg_field *f = kg_schema_field(i);
        json_t *v = json_object_get(out, f->name);
        if (f->has_strict_def)
            assert_true(json_number_value(v) == f->def_strict);
        else if (f->has_def && f->type == KG_FIELD_INT)
            assert_int_equal(json_integer_value(v), (json_int_t)f->def_num);
        else if (f->def_str && f->type == KG_FIELD_ENUM)
            assert_string_equal(json_string_value(v), f->def_str);
    }
    json_decref(out);
    json_decref(in);
}

static void test_verdicts_and_codes(void **state)
{
    (void)state;
    assert_int_equal(kg_schema_nverdicts(), 8);
    assert_true(kg_schema_is_verdict("problem_error"));
    assert_false(kg_schema_is_verdict("other"));
    assert_false(kg_schema_is_verdict(NULL));
    assert_true(kg_schema_is_hack_reason("timer_tamper"));
    assert_false(kg_schema_is_hack_reason("TIMER_TAMPER"));
    assert_string_equal(kg_schema_code_verdict("TIMER_TAMPER"), "hacked");
    assert_string_equal(kg_schema_code_verdict("BUILD_ERROR"), "compile_error");
    assert_string_equal(kg_schema_code_verdict("VALUE_MISMATCH"), "mismatch");
    assert_string_equal(kg_schema_code_verdict("SPAWN_FAILED"), "infra_error");
    assert_string_equal(kg_schema_code_verdict("TIMEOUT"), "timeout");
    assert_null(kg_schema_code_verdict("TIMER_TAMPERED"));
    assert_null(kg_schema_code_verdict("NOPE"));
}

/* The store's stored verdict numbers name exactly the schema's verdicts,
 * plus "other" for a missing or unknown one. */
static void test_store_verdicts_are_the_schemas(void **state)
{
    (void)state;
    size_t seen = 0;
    for (int i = 0; i < KG_NVERDICT; i++) {
        const char *n = kg_verdict_name(i);
        if (!strcmp(n, "other"))
            continue;
        assert_true(kg_schema_is_verdict(n));
        assert_int_equal(kg_verdict_parse(n), i);
        seen++;
    }
    assert_int_equal(seen, kg_schema_nverdicts());
}

static void test_json_form(void **state)
{
    (void)state;
    long n = kg_schema_json(NULL, 0);
    assert_true(n > 100);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(kg_schema_json(buf, (size_t)n + 1), n);
    json_error_t je;
    json_t *root = json_loads(buf, 0, &je);
    assert_non_null(root);
    assert_int_equal(json_array_size(json_object_get(root, "fields")),
                     kg_schema_nfields());
    assert_int_equal(json_array_size(json_object_get(root, "verdicts")),
                     kg_schema_nverdicts());
    json_t *codes = json_object_get(root, "error_codes");
    assert_string_equal(json_string_value(json_object_get(codes, "L2_PERSIST")),
                        "hack");
    /* a short buffer is cut and terminated, and still says the length */
    char small[8];
    assert_int_equal(kg_schema_json(small, sizeof small), n);
    assert_int_equal(strlen(small), 7);
    json_decref(root);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_and_types),
        cmocka_unit_test(test_request_defaults_come_from_schema),
        cmocka_unit_test(test_verdicts_and_codes),
        cmocka_unit_test(test_store_verdicts_are_the_schemas),
        cmocka_unit_test(test_json_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
