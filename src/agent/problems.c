/* problems.c - loading a rollout's problems (problems.h). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/problems.h"
#include "common/code_file.h"
#include "corpus/kernelbench.h"
#include "common/code_file.h"
#include "common/log.h"
#include "common/request.h"

#define MAX_PROBLEMS 100000

/* NULL when text looks like a reference program for entry point ep, else
 * why not. */
static const char *not_reference(const char *text, const char *ep)
{
    char cls[160];
    snprintf(cls, sizeof cls, "class %s", ep ? ep : "Model");
    const char *c = strstr(text, cls);
    if (!c || (c[strlen(cls)] != '(' && c[strlen(cls)] != ':'))
        return ep ? "no class of its entry point" : "no `class Model`";
    if (!strstr(text, "def get_inputs"))
        return "no `def get_inputs`";
    return NULL;
}

/* Adds a problem (every string copied; prompt increfed). 0 or KG_ENOMEM. */
static int add(kg_problems *ps, const char *name, const char *ref,
               const char *ep, json_t *prompt)
{
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 64;
        kg_problem *p = realloc(ps->p, (size_t)cap * sizeof *p);
        if (!p)
            return KG_ENOMEM;
        ps->p = p;
        ps->cap = cap;
    }
    kg_problem *p = &ps->p[ps->n];
    p->name = strdup(name);
    p->reference = strdup(ref);
    p->entry_point = ep ? strdup(ep) : NULL;
    p->prompt = prompt ? json_incref(prompt) : NULL;
    if (!p->name || !p->reference || (ep && !p->entry_point)) {
        free(p->name);
        free(p->reference);
        free(p->entry_point);
        json_decref(p->prompt);
        return KG_ENOMEM;
    }
    ps->n++;
    return 0;
}

/* Reads one reference file as problem `name`; a file that does not load
 * is reported and skipped (0). KG_ENOMEM only. */
static int add_file(kg_problems *ps, const char *path, const char *name)
{
    kg_err err = {{0}};
    size_t len;
    char *text = kg_read_code_file(path, "reference_code", &len, &err);
    const char *why = text ? not_reference(text, NULL) : err.msg;
    int rc = 0;
    if (why) {
        kg_warn("problem %s skipped: %s%s%s", name, text ? path : "",
                text ? ": " : "", why);
        ps->skipped++;
    } else {
        rc = add(ps, name, text, NULL, NULL);
    }
    free(text);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.py of dir (sorted), named by stem. */
static int load_folder(kg_problems *ps, const char *dir, kg_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return kg_errf(err, KG_EIO, "--problems %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= 3 || strcmp(de->d_name + l - 3, ".py") || n >= MAX_PROBLEMS)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX], stem[NAME_MAX + 1];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(stem, sizeof stem, "%.*s", (int)strlen(names[i]) - 3,
                 names[i]);
        if (!rc)
            rc = add_file(ps, path, stem);
        free(names[i]);
    }
    free(names);
    return rc ? kg_errf(err, rc, "out of memory") : 0;
}

/* A KernelBench tree: every level folder present. */
static int load_tree(kg_problems *ps, const char *dir, kg_err *err)
{
    kb_tree tree = {0};
    int rc = kb_tree_read(&tree, dir, 0, NULL, err);
    for (int i = 0; rc == 0 && i < tree.n; i++) {
        char name[512];
        snprintf(name, sizeof name, "level%d/%s", tree.p[i].level,
                 tree.p[i].name);
        if (add_file(ps, tree.p[i].path, name))
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
    }
    kb_tree_free(&tree);
    return rc;
}

/* The name of a dataset row: extra_info.name, problem_id or index, else
 * "line<N>". */
static void row_name(const json_t *info, long line, char *out, size_t n)
{
    static const char *keys[] = {"name", "problem_id", "problem_name",
                                 "index"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(info, keys[i]);
        if (json_is_string(v) && *json_string_value(v)) {
            snprintf(out, n, "%s", json_string_value(v));
            return;
        }
        if (json_is_integer(v)) {
            snprintf(out, n, "%lld", (long long)json_integer_value(v));
            return;
        }
    }
    snprintf(out, n, "line%ld", line);
}

/* One dataset row (line number `line`) into ps; a bad row is reported and
 * skipped. KG_ENOMEM only. */
static int add_row(kg_problems *ps, const char *path, long line,
                   const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    json_t *info = json_object_get(j, "extra_info");
    json_t *gt = json_object_get(json_object_get(j, "reward_model"),
                                 "ground_truth");
    const char *ep = json_string_value(json_object_get(info, "entry_point"));
    json_t *prompt = json_object_get(j, "prompt");
    char name[256];
    row_name(info, line, name, sizeof name);
    const char *why = NULL, *ref = json_string_value(gt);
    if (!j)
        why = je.text;
    else if (!ref)
        why = "no string reward_model.ground_truth";
    else if (!*ref || strlen(ref) > KG_MAX_REFERENCE_CODE)
        why = "ground_truth empty or over 512 KiB";
    else if (prompt && !json_is_string(prompt) && !json_is_array(prompt))
        why = "prompt is neither a string nor a list of messages";
    else
        why = not_reference(ref, ep);
    for (int i = 0; !why && i < ps->n; i++)
        if (!strcmp(ps->p[i].name, name))
            why = "its name is taken by an earlier row";
    int rc = 0;
    if (why) {
        kg_warn("problem %s (%s line %ld) skipped: %s", name, path, line, why);
        ps->skipped++;
    } else {
        rc = add(ps, name, ref, ep, prompt);
    }
    json_decref(j);
    return rc;
}

static int load_jsonl(kg_problems *ps, const char *path, kg_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return kg_errf(err, KG_EIO, "--problems %s: %s", path,
                       strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    long no = 0;
    int rc = 0;
    while (!rc && getline(&line, &cap, f) >= 0) {
        no++;
        const char *t = line + strspn(line, " \t\r\n");
        if (*t)
            rc = add_row(ps, path, no, t);
    }
    free(line);
    fclose(f);
    return rc ? kg_errf(err, rc, "out of memory") : 0;
}

int kg_problems_load(kg_problems *ps, const char *path, kg_err *err)
{
    memset(ps, 0, sizeof *ps);
    struct stat st;
    if (stat(path, &st) < 0)
        return kg_errf(err, KG_ENOTFOUND, "--problems %s: %s", path,
                       strerror(errno));
    size_t l = strlen(path);
    int rc;
    char lv[PATH_MAX];
    snprintf(lv, sizeof lv, "%s/level1", path);
    struct stat ls;
    int tree = S_ISDIR(st.st_mode) && stat(lv, &ls) == 0;
    snprintf(lv, sizeof lv, "%s/KernelBench/level1", path);
    tree = tree || (S_ISDIR(st.st_mode) && stat(lv, &ls) == 0);
    if (tree)
        rc = load_tree(ps, path, err);
    else if (S_ISDIR(st.st_mode))
        rc = load_folder(ps, path, err);
    else if (l > 3 && !strcmp(path + l - 3, ".py")) {
        char stem[NAME_MAX + 1];
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        snprintf(stem, sizeof stem, "%.*s", (int)strlen(b) - 3, b);
        rc = add_file(ps, path, stem) ? kg_errf(err, KG_ENOMEM, "no memory")
                                      : 0;
    } else
        rc = load_jsonl(ps, path, err);
    if (!rc && ps->n == 0)
        rc = kg_errf(err, KG_ENOTFOUND, "--problems %s: no problem loaded%s",
                     path, ps->skipped ? " (every one was skipped)" : "");
    return rc;
}

void kg_problems_free(kg_problems *ps)
{
    for (int i = 0; i < ps->n; i++) {
        free(ps->p[i].name);
        free(ps->p[i].reference);
        free(ps->p[i].entry_point);
        json_decref(ps->p[i].prompt);
    }
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}
