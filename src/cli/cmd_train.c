/* cmd_train.c - kgym train: execs the trainer, python/kgym/train.py, under
 * the project's Python (KGYM_PYTHON, else <root>/.venv/bin/python, else
 * python3 from PATH) with <root>/python on PYTHONPATH and KGYM_LIB set to
 * the libkgym.so next to this executable when it is not set. Every
 * argument goes to the trainer unchanged (docs/training.md). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"

int kg_cli_train(int argc, char **argv)
{
    char root[PATH_MAX], py[PATH_MAX + 32], script[PATH_MAX + 32];
    char path[2 * PATH_MAX + 32], lib[PATH_MAX + 32];
    kg_cli_root(root, sizeof root);
    snprintf(script, sizeof script, "%s/python/kgym/train.py", root);
    if (access(script, R_OK)) {
        fprintf(stderr, "kgym train: %s: %s\n", script, strerror(errno));
        return 2;
    }
    const char *env = getenv("KGYM_PYTHON");
    if (env && *env)
        snprintf(py, sizeof py, "%s", env);
    else {
        snprintf(py, sizeof py, "%s/.venv/bin/python", root);
        if (access(py, X_OK))
            snprintf(py, sizeof py, "python3");
    }
    const char *pp = getenv("PYTHONPATH");
    snprintf(path, sizeof path, "%s/python%s%s", root, pp && *pp ? ":" : "",
             pp && *pp ? pp : "");
    setenv("PYTHONPATH", path, 1);
    const char *kl = getenv("KGYM_LIB");
    if ((!kl || !*kl) && !kg_cli_exe_path(lib, sizeof lib - 16)) {
        char *s = strrchr(lib, '/');
        if (s) {
            strcpy(s + 1, "libkgym.so");
            if (!access(lib, R_OK))
                setenv("KGYM_LIB", lib, 1);
        }
    }
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) {
        fprintf(stderr, "kgym train: out of memory\n");
        return 1;
    }
    args[0] = py;
    args[1] = script;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    execvp(py, args);
    fprintf(stderr, "kgym train: cannot run %s: %s (set KGYM_PYTHON)\n", py,
            strerror(errno));
    free(args);
    return 1;
}
