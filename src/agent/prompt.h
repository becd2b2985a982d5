/*
 * prompt.h - the agent's prompts and what it reads back from a reply:
 * templates (libkgym's defaults, kgym/prompt.h, or files), filled by name,
 * and the code of a reply (its last fenced python block defining
 * ModelNew).
 */
#ifndef KGYM_AGENT_PROMPT_H
#define KGYM_AGENT_PROMPT_H

#include <stddef.h>

#include "kgym/kgym.h"
#include "kgym/prompt.h" /* the default templates and hints */


/*
 * Fills a template: each "{name}" whose name is one of keys[0..n) is
 * replaced by vals[i] (copied as is: braces in a value are not scanned);
 * any other brace is kept, so code in a template needs no escaping.
 * Returns the text (caller frees), NULL when out of memory.
 */
char *kg_prompt_fill(const char *tmpl, const char *const *keys,
                     const char *const *vals, int n);

/* Why a reply gave no code (kg_extract_code's result). */
enum kg_code_status {
    KG_CODE_OK = 0,
    KG_CODE_NO_BLOCK,    /* no ```python block */
    KG_CODE_UNCLOSED,    /* the last block is not closed (cut off?) */
    KG_CODE_NO_MODELNEW, /* the block defines no class ModelNew */
    KG_CODE_TOO_LARGE,   /* over the kernel_code limit */
};

/*
 * The code of a reply: the body of its last fenced block opened by a line
 * "```python" or "```py" (leading spaces allowed, case-insensitive, text
 * after the tag ignored) and closed by a line starting with "```". The
 * code must define `class ModelNew` and fit the kernel_code limit. On
 * KG_CODE_OK *code is the block's text (caller frees); otherwise *code is
 * NULL. *why (if non-NULL) gets a one-line reason written for the policy
 * (static), "" on success.
 */
int kg_extract_code(const char *reply, char **code, const char **why);

/* Reads a template file (at most 64 KiB, UTF-8 text). Caller frees. */
char *kg_prompt_read_file(const char *path, kg_err *err);

#endif
