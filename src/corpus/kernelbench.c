/* kernelbench.c - KernelBench's tree as is: the problems of DIR/levelN,
 * filtered by level and by name, and the candidates paired with them by
 * file name (kernelbench.h). */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corpus/kernelbench.h"

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int kb_parse_levels(const char *s, unsigned *levels, kg_err *err)
{
    *levels = 0;
    const char *q = s;
    while (*q) {
        char *end;
        long n = strtol(q, &end, 10);
        if (end == q || n < 1 || n > KB_MAX_LEVEL || (*end && *end != ','))
            return kg_errf(err, KG_EINVAL,
                           "--level: comma-separated levels from 1 to %d, "
                           "not '%s'",
                           KB_MAX_LEVEL, s);
        *levels |= 1u << n;
        q = *end ? end + 1 : end;
    }
    if (!*levels)
        return kg_errf(err, KG_EINVAL, "--level: no level in '%s'", s);
    return 0;
}

/* 1 when one of the comma-separated globs matches the stem, the file name
 * or "levelN/stem" (globs NULL: everything matches). */
static int wanted(const char *globs, int level, const char *file,
                  const char *stem)
{
    if (!globs)
        return 1;
    char lv[300];
    snprintf(lv, sizeof lv, "level%d/%s", level, stem);
    const char *g = globs;
    while (*g) {
        size_t l = strcspn(g, ",");
        char pat[256];
        if (l > 0 && l < sizeof pat) {
            memcpy(pat, g, l);
            pat[l] = 0;
            if (!fnmatch(pat, stem, 0) || !fnmatch(pat, file, 0) ||
                !fnmatch(pat, lv, 0))
                return 1;
        }
        g += l + (g[l] == ',');
    }
    return 0;
}

static int cmp_problem(const void *a, const void *b)
{
    const kb_problem *x = a, *y = b;
    if (x->level != y->level)
        return x->level - y->level;
    if (x->number != y->number)
        return x->number < y->number ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Adds the matching *.py of root/levelN to tree. 0 or a negative code. */
static int read_level(kb_tree *tree, int level, const char *globs,
                      kg_err *err)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/level%d", tree->root, level);
    DIR *d = opendir(dir);
    if (!d)
        return kg_errf(err, KG_EIO, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= 3 || strcmp(de->d_name + l - 3, ".py") ||
            de->d_name[0] == '.' || l >= 256)
            continue;
        char stem[256];
        memcpy(stem, de->d_name, l - 3);
        stem[l - 3] = 0;
        if (!wanted(globs, level, de->d_name, stem))
            continue;
        if (tree->n >= KB_MAX_PROBLEMS) {
            rc = kg_errf(err, KG_EINVAL, "more than %d problems",
                         KB_MAX_PROBLEMS);
            break;
        }
        kb_problem *p = &tree->p[tree->n++];
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        p->path = strdup(path);
        p->name = strdup(stem);
        p->level = level;
        char *end;
        p->number = strtol(stem, &end, 10);
        if (end == stem || *end != '_')
            p->number = -1;
    }
    closedir(d);
    return rc;
}

/* tree->root: dir, or dir/KernelBench when only that holds level folders. */
static int find_root(kb_tree *tree, const char *dir, kg_err *err)
{
    if (strlen(dir) >= sizeof tree->root - 32)
        return kg_errf(err, KG_EINVAL, "--kernelbench: path too long");
    if (!is_dir(dir))
        return kg_errf(err, KG_ENOTFOUND, "--kernelbench %s: %s", dir,
                       errno ? strerror(errno) : "not a directory");
    snprintf(tree->root, sizeof tree->root, "%.3000s", dir);
    for (int lv = 1; lv <= KB_MAX_LEVEL; lv++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%.3000s/level%d", dir, lv);
        if (is_dir(p))
            return 0;
        snprintf(p, sizeof p, "%.3000s/KernelBench/level%d", dir, lv);
        if (is_dir(p)) {
            snprintf(tree->root, sizeof tree->root, "%.3000s/KernelBench", dir);
            return 0;
        }
    }
    return kg_errf(err, KG_ENOTFOUND,
                   "--kernelbench %s: no level1..level%d folder (KernelBench's "
                   "tree: DIR/level1/<N>_<Name>.py)",
                   dir, KB_MAX_LEVEL);
}

int kb_tree_read(kb_tree *tree, const char *dir, unsigned levels,
                 const char *globs, kg_err *err)
{
    memset(tree, 0, sizeof *tree);
    errno = 0;
    int rc = find_root(tree, dir, err);
    if (rc)
        return rc;
    tree->p = calloc(KB_MAX_PROBLEMS, sizeof *tree->p);
    if (!tree->p)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    for (int lv = 1; lv <= KB_MAX_LEVEL && !rc; lv++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/level%d", tree->root, lv);
        int present = is_dir(p);
        if (levels & (1u << lv) && !present)
            rc = kg_errf(err, KG_ENOTFOUND, "--level %d: no folder %s", lv, p);
        else if (present && (levels ? levels & (1u << lv)
                                    : lv <= KB_DEFAULT_LEVELS))
            rc = read_level(tree, lv, globs, err);
        else if (present && !levels) /* left by the default, not by --level */
            tree->skipped |= 1u << lv;
    }
    if (!rc && tree->n == 0)
        rc = kg_errf(err, KG_ENOTFOUND, "%s: no problem matched%s%s",
                     tree->root, globs ? " --problems " : "",
                     globs ? globs : "");
    if (rc) {
        kb_tree_free(tree);
        return rc;
    }
    qsort(tree->p, (size_t)tree->n, sizeof *tree->p, cmp_problem);
    return 0;
}

int kb_tree_pair(kb_tree *tree, const char *canddir)
{
    int found = 0;
    for (int i = 0; i < tree->n; i++) {
        kb_problem *p = &tree->p[i];
        char c[PATH_MAX + 300];
        snprintf(c, sizeof c, "%s/level%d/%s.py", canddir, p->level, p->name);
        if (!is_file(c))
            snprintf(c, sizeof c, "%s/%s.py", canddir, p->name);
        if (is_file(c)) {
            p->cand = strdup(c);
            found++;
        }
    }
    return found;
}

void kb_tree_free(kb_tree *tree)
{
    for (int i = 0; i < tree->n; i++) {
        free(tree->p[i].path);
        free(tree->p[i].cand);
        free(tree->p[i].name);
    }
    free(tree->p);
    tree->p = NULL;
    tree->n = 0;
}

/* Copies field k of src into dst when present (null otherwise). */
static void copy_field(json_t *dst, const char *k, const json_t *src,
                       const char *as)
{
    json_t *v = json_object_get(src, k);
    json_object_set_new(dst, as ? as : k, v ? json_deep_copy(v) : json_null());
}

json_t *kb_line(const kb_problem *p, const json_t *result)
{
    json_t *l = json_object();
    json_object_set_new(l, "problem", json_string(p->name));
    json_object_set_new(l, "level", json_integer(p->level));
    json_object_set_new(l, "file", json_string(p->path));
    json_object_set_new(l, "candidate",
                        p->cand ? json_string(p->cand) : json_null());
    copy_field(l, "verdict", result, NULL);
    copy_field(l, "speedup", result, NULL);
    copy_field(l, "kernel_runtime", result, NULL);
    copy_field(l, "reference_runtime", result, NULL);
    copy_field(l, "runtime_stats", result, NULL);
    copy_field(l, "error_code", result, NULL);
    copy_field(l, "error_message", result, "error");
    copy_field(l, "hack_reasons", result, NULL);
    copy_field(l, "warnings", result, NULL);
    copy_field(l, "memory", result, NULL); /* peak per process */
    /* why a speedup is what it is: the judge's clock, and each side's lead */
    json_t *checks = json_object_get(result, "checks");
    copy_field(l, "trusted_clock", checks, NULL);
    copy_field(l, "trusted_clock_retried", checks, NULL); /* its first look */
    copy_field(l, "timing_lead", checks, NULL);
    /* run again alone after an out of memory beside others (docs/worker.md) */
    copy_field(l, "rerun", checks, NULL);
    /* where its time went (ms per phase: docs/worker.md) */
    copy_field(l, "timings", result, "phases");
    json_t *t = json_object_get(json_object_get(result, "timings"), "total");
    json_object_set_new(l, "seconds",
                        json_is_number(t)
                            ? json_real(json_number_value(t) / 1e3)
                            : json_null());
    /* how long it waited to start (a slot, or memory to fit: docs/worker.md) */
    json_t *q = json_object_get(json_object_get(result, "timings"), "queued");
    json_object_set_new(l, "queued_seconds",
                        json_is_number(q) ? json_real(json_number_value(q) / 1e3)
                                          : json_null());
    return l;
}
