/*
 * kgym/prompt.h - the agent's default prompt templates and backend hints,
 * static text shared by the C agent (src/agent/) and, through ctypes,
 * Python (kgym.prompts). Placeholders are "{name}": {reference},
 * {backend}, {backend_hint}, {entry_point} in the first turn's; {feedback}
 * and {turn} (1-based) in the refinement's.
 */
#ifndef KGYM_PROMPT_H
#define KGYM_PROMPT_H

#ifdef __cplusplus
extern "C" {
#endif

extern const char kg_prompt_default_system[];
extern const char kg_prompt_default_first[];
extern const char kg_prompt_default_refine[];

/* The default template named "system", "first" or "refine"; NULL for any
 * other name. */
const char *kg_prompt_default(const char *name);

/* What to write for {backend_hint}: how kernels are written on backend
 * ("cpu", "triton", "cuda"; anything else, NULL included: a generic
 * line). */
const char *kg_prompt_backend_hint(const char *backend);

#ifdef __cplusplus
}
#endif

#endif
