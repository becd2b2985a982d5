/* test_agent_prompt.c - the agent's prompts and code extraction
 * (src/agent/prompt.c): placeholders filled by name and nothing else, the
 * last fenced python block, and each reason a reply gives no code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/prompt.h"

static void test_fill_named_only(void **state)
{
    (void)state;
    const char *keys[] = {"feedback", "turn"};
    const char *vals[] = {"Verdict: mismatch {turn}", "2"};
    char *s = kg_prompt_fill("turn {turn}: {feedback}; {other} {} {turn",
                             keys, vals, 2);
    /* a value's braces are not scanned; unknown and broken ones stay */
    assert_string_equal(s, "turn 2: Verdict: mismatch {turn}; {other} {} "
                           "{turn");
    free(s);
    s = kg_prompt_fill("", keys, vals, 2);
    assert_string_equal(s, "");
    free(s);
}

static void test_defaults_have_their_placeholders(void **state)
{
    (void)state;
    assert_non_null(strstr(kg_prompt_default_first, "{reference}"));
    assert_non_null(strstr(kg_prompt_default_first, "{backend_hint}"));
    assert_non_null(strstr(kg_prompt_default_refine, "{feedback}"));
    const char *keys[] = {"reference", "backend_hint", "entry_point",
                          "backend"};
    const char *vals[] = {"class Model: pass", "HINT", "Model", "cpu"};
    char *s = kg_prompt_fill(kg_prompt_default_first, keys, vals, 4);
    assert_non_null(strstr(s, "```python\nclass Model: pass\n```"));
    assert_non_null(strstr(s, "HINT"));
    assert_null(strstr(s, "{reference}"));
    free(s);
    assert_non_null(strstr(kg_prompt_backend_hint("triton"), "Triton"));
    assert_non_null(strstr(kg_prompt_backend_hint("cuda"), "CUDA"));
}

static void test_last_python_block(void **state)
{
    (void)state;
    char *code;
    const char *why;
    const char *reply = "Plan.\n```python\nclass ModelNew: # first\n    pass\n"
                        "```\ntext\n```\nnot python\n```\n"
                        "  ```Python  \nimport torch\nclass ModelNew(object):\n"
                        "    pass\n  ```\nbye";
    assert_int_equal(kg_extract_code(reply, &code, &why), KG_CODE_OK);
    assert_string_equal(code,
                        "import torch\nclass ModelNew(object):\n    pass\n");
    assert_string_equal(why, "");
    free(code);
    /* ```py counts; ```pyx does not */
    assert_int_equal(kg_extract_code("```py\nclass ModelNew:\n  x=1\n```",
                                     &code, &why),
                     KG_CODE_OK);
    assert_string_equal(code, "class ModelNew:\n  x=1\n");
    free(code);
    assert_int_equal(
        kg_extract_code("```pyx\nclass ModelNew: pass\n```", &code, &why),
        KG_CODE_NO_BLOCK);
    assert_null(code);
}

static void test_no_code_reasons(void **state)
{
    (void)state;
    char *code;
    const char *why;
    assert_int_equal(kg_extract_code("I cannot help.", &code, &why),
                     KG_CODE_NO_BLOCK);
    assert_null(code);
    assert_non_null(strstr(why, "no fenced ```python"));
    assert_int_equal(kg_extract_code(NULL, &code, &why), KG_CODE_NO_BLOCK);
    assert_int_equal(
        kg_extract_code("```python\nclass Model(nn.Module): pass\n```", &code,
                        &why),
        KG_CODE_NO_MODELNEW);
    assert_null(code);
    assert_non_null(strstr(why, "class ModelNew"));
    /* a name that merely starts with ModelNew is not it */
    assert_int_equal(
        kg_extract_code("```python\nclass ModelNewer: pass\n```", &code, &why),
        KG_CODE_NO_MODELNEW);
    /* cut off: the last block never closes, even after a good one */
    assert_int_equal(kg_extract_code("```python\nclass ModelNew: pass\n```\n"
                                     "```python\nclass ModelNew:\n    def",
                                     &code, &why),
                     KG_CODE_UNCLOSED);
    assert_null(code);
    assert_non_null(strstr(why, "not closed"));
    /* over the kernel_code limit */
    size_t n = 300 * 1024;
    char *big = malloc(n + 64);
    strcpy(big, "```python\nclass ModelNew: pass\n");
    size_t l = strlen(big);
    memset(big + l, '#', n);
    strcpy(big + l + n, "\n```\n");
    assert_int_equal(kg_extract_code(big, &code, &why), KG_CODE_TOO_LARGE);
    assert_null(code);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_named_only),
        cmocka_unit_test(test_defaults_have_their_placeholders),
        cmocka_unit_test(test_last_python_block),
        cmocka_unit_test(test_no_code_reasons),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
