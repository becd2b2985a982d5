/*
 * redteam_case.h - one candidate of the red-team corpus: its header line
 * (docs/redteam.md) and whether a result meets it. `kgym redteam`
 * (cmd_redteam.c) reads the corpus with these and runs it.
 */
#ifndef KGYM_REDTEAM_CASE_H
#define KGYM_REDTEAM_CASE_H

#include <jansson.h>
#include <stddef.h>

#include "kgym/kgym.h"

#define KG_RT_HEADER_TAG "# redteam:"

/* How a result compares with its header. */
enum { KG_RT_OK = 1, KG_RT_MISS, KG_RT_FALSE_ALARM, KG_RT_ERROR };

/* A parsed header. Every string is owned by the case (NULL when absent);
 * kg_rt_case_free releases them. Zero-initialise before parsing. */
typedef struct kg_rt_case {
    char *family;   /* "honest" or a THREATS.md family */
    char *problem;  /* reference path as written */
    char *backend;  /* cpu | triton | cuda */
    char *expect;   /* verdicts joined by '|' */
    char *reasons;  /* groups joined by ',', alternatives by '|' */
    char *code;     /* error codes joined by '|' */
    char *warn;     /* a warning that must be present */
    int needs_gpu;  /* needs=gpu, or backend cuda */
    json_t *fields; /* request fields of fields= (an object, owned) */
} kg_rt_case;

/*
 * Parses the first line of a candidate's source ("# redteam: key=value
 * ...") into c and checks it against itself (known keys and verdicts,
 * reasons only with hacked, honest expects pass). The problem file and
 * the request fields' values are the caller's to check. Returns 0 or
 * KG_EINVAL / KG_ENOMEM with the message in err; c may hold part of the
 * header either way (free it).
 */
int kg_rt_case_parse(kg_rt_case *c, const char *code, kg_err *err);

/* Frees what c owns and zeroes it. */
void kg_rt_case_free(kg_rt_case *c);

/*
 * KG_RT_OK when result meets the header: its verdict is one of expect and,
 * when hacked, every reasons group has an alternative in hack_reasons; the
 * error_code is one of code; warn is in a warnings entry or a truthy key
 * of checks. Otherwise KG_RT_ERROR for infra_error or problem_error (the
 * problem's reference failed) or no verdict,
 * KG_RT_FALSE_ALARM for an honest candidate, KG_RT_MISS for a cheat.
 */
int kg_rt_case_judge(const kg_rt_case *c, json_t *result);

/* "expect[reasons] code +warn", as the table shows it, into buf. */
void kg_rt_expected_text(const kg_rt_case *c, char *buf, size_t n);

/* "verdict[hack,reasons]" or "verdict ERROR_CODE", into buf. */
void kg_rt_got_text(json_t *result, char *buf, size_t n);

#endif
