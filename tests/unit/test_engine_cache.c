/*
 * test_engine_cache.c - the candidates' shared cache directory
 * (eng_cand_cache_dir) when several workers of one machine make it at
 * once: every call succeeds and leaves root:CAND_GID, mode 2770. Needs
 * root (chown to the candidates' group).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "need_root.h"

#include "worker/engine_impl.h"
#include "worker/sandbox.h"

#define WORKERS 6
#define ROUNDS 60

/* One round: d holds a stale layout (root:root 0700, as another kgym
 * version would leave it); WORKERS processes released at once by one
 * pipe each make the cache. Returns how many calls failed. */
static int one_round(const char *d)
{
    kg_err err = {{0}};
    (void)kg_sandbox_rmtree(d, &err);
    assert_int_equal(mkdir(d, 0700), 0);
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pids[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) != 0) /* EOF: all released together */
                _exit(2);
            kg_err e = {{0}};
            if (eng_cand_cache_dir(d, &e) != 0) {
                fprintf(stderr, "worker %d: %s\n", w, e.msg);
                _exit(1);
            }
            _exit(0);
        }
    }
    close(go[0]);
    close(go[1]);
    int failed = 0;
    for (int w = 0; w < WORKERS; w++) {
        int st;
        assert_int_equal(waitpid(pids[w], &st, 0), pids[w]);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return failed;
}

static void test_workers_make_the_cache_at_once(void **state)
{
    (void)state;
    NEED_ROOT("chown to the candidates' group");
    char base[] = "/tmp/kgym-cache-race-XXXXXX";
    assert_non_null(mkdtemp(base));
    char d[128];
    snprintf(d, sizeof d, "%s/candidate", base);
    int failed = 0;
    for (int r = 0; r < ROUNDS; r++)
        failed += one_round(d);
    assert_int_equal(failed, 0);
    struct stat s;
    assert_int_equal(lstat(d, &s), 0);
    assert_true(S_ISDIR(s.st_mode));
    assert_int_equal(s.st_uid, 0);
    assert_int_equal(s.st_gid, CAND_GID);
    assert_int_equal(s.st_mode & 07777, 02770);
    kg_err err = {{0}};
    assert_int_equal(kg_sandbox_rmtree(base, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers_make_the_cache_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
