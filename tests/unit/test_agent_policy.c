/* test_agent_policy.c - the chat API's JSON in the policy client
 * (src/agent/policy_msg.c): the request body as configured, and replies
 * read or refused with a one-line reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/policy.h"

static kg_policy_req parse(const char *body, int *rc, kg_err *err)
{
    kg_policy_req r;
    memset(&r, 0, sizeof r);
    *rc = kg_policy_parse(&r, body, strlen(body), err);
    return r;
}

static void test_body(void **state)
{
    (void)state;
    kg_policy_cfg cfg;
    kg_policy_cfg_default(&cfg);
    cfg.model = "m";
    kg_policy_req r = {.messages = json_pack("[{s:s,s:s}]", "role", "user",
                                             "content", "hi"),
                       .n = 4};
    json_t *b = kg_policy_body(&cfg, &r);
    /* unset sampling fields are not sent; no logprobs unless asked */
    assert_string_equal(json_string_value(json_object_get(b, "model")), "m");
    assert_int_equal(json_integer_value(json_object_get(b, "n")), 4);
    assert_null(json_object_get(b, "temperature"));
    assert_null(json_object_get(b, "logprobs"));
    assert_null(json_object_get(b, "seed"));
    json_decref(b);
    cfg.temperature = 0;
    cfg.max_tokens = 100;
    cfg.logprobs = 1;
    r.has_seed = 1;
    r.seed = 42;
    b = kg_policy_body(&cfg, &r);
    assert_true(json_number_value(json_object_get(b, "temperature")) == 0);
    assert_true(json_is_true(json_object_get(b, "logprobs")));
    assert_true(json_is_true(json_object_get(b, "return_token_ids")));
    assert_int_equal(json_integer_value(json_object_get(b, "seed")), 42);
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 100);
    json_decref(b);
    json_decref(r.messages);
}

static void test_reply(void **state)
{
    (void)state;
    int rc;
    kg_err err = {{0}};
    kg_policy_req r = parse(
        "{\"choices\": [{\"index\": 1, \"message\": {\"content\": null}},"
        "{\"index\": 0, \"finish_reason\": \"length\", \"message\": "
        "{\"role\": \"assistant\", \"content\": \"a b\"}, \"token_ids\": [5, 6],"
        "\"logprobs\": {\"content\": [{\"token\": \"a\", \"logprob\": -0.5},"
        "{\"token\": \"b\", \"logprob\": 0}]}}],"
        "\"usage\": {\"prompt_tokens\": 10, \"completion_tokens\": 2}}",
        &rc, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(r.nchoices, 2);
    assert_string_equal(r.choices[0].content, "a b");
    assert_string_equal(r.choices[0].finish_reason, "length");
    assert_int_equal(json_array_size(r.choices[0].token_ids), 2);
    assert_true(json_number_value(json_array_get(r.choices[0].logprobs, 0)) ==
                -0.5);
    assert_string_equal(r.choices[1].content, ""); /* null content */
    assert_null(r.choices[1].logprobs);
    assert_int_equal(r.prompt_tokens, 10);
    assert_int_equal(r.completion_tokens, 2);
    kg_policy_req_clear(&r);
    /* no usage: -1 */
    r = parse("{\"choices\": [{\"message\": {\"content\": \"x\"}}]}", &rc,
              &err);
    assert_int_equal(rc, 0);
    assert_int_equal(r.prompt_tokens, -1);
    kg_policy_req_clear(&r);
}

/* \u0000 is valid JSON: the reply is read, each NUL as U+FFFD in content
 * and as byte 0xFF in nul_content; a reply without one has no
 * nul_content. */
static void test_reply_with_nul(void **state)
{
    (void)state;
    int rc;
    kg_err err = {{0}};
    kg_policy_req r = parse("{\"choices\": [{\"message\": {\"content\": "
                            "\"a\\u0000b\\u0000\"}}]}",
                            &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(r.choices[0].content, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
    assert_string_equal(r.choices[0].nul_content, "a\xFF" "b\xFF");
    kg_policy_req_clear(&r);
    r = parse("{\"choices\": [{\"message\": {\"content\": \"ab\"}}]}", &rc,
              &err);
    assert_int_equal(rc, 0);
    assert_null(r.choices[0].nul_content);
    kg_policy_req_clear(&r);
}

static void test_bad_replies(void **state)
{
    (void)state;
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"{\"choices\": [{\"message\": {\"content\": \"tru", "not JSON"},
        {"", "not JSON"},
        {"[1]", "not a JSON object"},
        {"{\"object\": \"error\"}", "no choices"},
        {"{\"choices\": []}", "no choices"},
        {"{\"choices\": [{\"text\": \"x\"}]}", "no message"},
        {"{\"choices\": [{\"message\": {\"content\": 5}}]}", "not a string"},
        {"{\"choices\": [{\"index\": 3, \"message\": {\"content\": \"x\"}}]}",
         "indices"},
        {"{\"choices\": [{\"index\": 0, \"message\": {\"content\": \"x\"}},"
         "{\"index\": 0, \"message\": {\"content\": \"y\"}}]}",
         "indices"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc;
        kg_err err = {{0}};
        kg_policy_req r = parse(cases[i].body, &rc, &err);
        assert_int_equal(rc, KG_EPARSE);
        assert_non_null(strstr(err.msg, cases[i].msg));
        assert_null(strchr(err.msg, '\n'));
        assert_null(r.choices);
        assert_int_equal(r.nchoices, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body),
        cmocka_unit_test(test_reply),
        cmocka_unit_test(test_bad_replies),
        cmocka_unit_test(test_reply_with_nul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
