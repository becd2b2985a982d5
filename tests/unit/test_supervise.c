/* test_supervise.c - kgym serve's local workers (src/server/supervise.c):
 * device lists from CUDA_VISIBLE_DEVICES, --workers parsing, and the
 * supervisor driving real processes (small shell scripts standing in for
 * `kgym worker`, so a test can make one crash, hang or ignore SIGTERM). */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/supervise.h"

static void test_gpu_devices_follow_cuda_visible_devices(void **state)
{
    (void)state;
    char d[8][KG_SUPER_DEVICE];
    assert_int_equal(kg_super_gpu_devices(NULL, 2, d, 8), 2);
    assert_string_equal(d[0], "cuda:0");
    assert_string_equal(d[1], "cuda:1");
    assert_int_equal(kg_super_gpu_devices(NULL, 0, d, 8), 0);
    assert_int_equal(kg_super_gpu_devices(NULL, 8, d, 3), 3);
    /* order kept, spaces allowed */
    assert_int_equal(kg_super_gpu_devices(" 1 , 0", 2, d, 8), 2);
    assert_string_equal(d[0], "cuda:1");
    assert_string_equal(d[1], "cuda:0");
    /* CUDA stops at the first invalid entry */
    assert_int_equal(kg_super_gpu_devices("0,5,1", 2, d, 8), 1);
    assert_int_equal(kg_super_gpu_devices("-1", 2, d, 8), 0);
    assert_int_equal(kg_super_gpu_devices("", 2, d, 8), 0);
    assert_int_equal(kg_super_gpu_devices("none", 2, d, 8), 0);
    /* a repeated device: CUDA refuses the rest */
    assert_int_equal(kg_super_gpu_devices("0,0,1", 2, d, 8), 1);
    /* UUIDs are passed on as they are (the worker's CUDA_VISIBLE_DEVICES) */
    assert_int_equal(
        kg_super_gpu_devices("GPU-8f3c2a10-aaaa-bbbb,MIG-1234-5678/1/0,1", 2,
                             d, 8),
        3);
    assert_string_equal(d[0], "cuda:GPU-8f3c2a10-aaaa-bbbb");
    assert_string_equal(d[1], "cuda:MIG-1234-5678/1/0");
    assert_string_equal(d[2], "cuda:1");
    assert_int_equal(kg_super_gpu_devices("GPU-8f3c", 0, d, 8), 0);
    assert_int_equal(kg_super_gpu_devices("GPU-$(reboot)", 1, d, 8), 0);
}

static void test_workers_spec(void **state)
{
    (void)state;
    char d[KG_SUPER_MAX][KG_SUPER_DEVICE];
    kg_err err;
    /* CUDA_VISIBLE_DEVICES="" hides every GPU, whatever the machine has */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    assert_int_equal(kg_super_devices("3", d, KG_SUPER_MAX, &err), 3);
    assert_string_equal(d[0], "cpu:0");
    assert_string_equal(d[2], "cpu:2");
    int n = kg_super_devices("auto", d, KG_SUPER_MAX, &err);
    assert_int_equal(n, kg_super_auto_cpu_workers());
    assert_true(n >= 1 && n <= 4);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    assert_true(n == 1 || n <= cpus / 2);
    const char *bad[] = {"0", "-1", "65", "two", "", "2x", "auto2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kg_super_devices(bad[i], d, KG_SUPER_MAX, &err),
                         KG_EINVAL);
        assert_non_null(strstr(err.msg, "--workers"));
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
}

/* ---- the supervisor, on real processes ---------------------------------- */

static char dir[64];

/* Writes an executable shell script into dir; returns its path (static
 * buffer per call site is the caller's copy). */
static void script(char *path, size_t n, const char *name, const char *body)
{
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/kgym-super-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

struct exits {
    int n;
    char ids[16][KG_SUPER_ID];
};

static void on_exit_hook(void *ctx, const char *id)
{
    struct exits *e = ctx;
    if (e->n < 16)
        snprintf(e->ids[e->n++], KG_SUPER_ID, "%s", id);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits up to ms for pred(s) to hold. */
static int wait_for(kg_super *s, int (*pred)(const kg_super_stats *), int ms)
{
    for (int t = 0; t < ms; t += 20) {
        kg_super_stats st;
        kg_super_stats_get(s, &st);
        if (pred(&st))
            return 1;
        sleep_ms(20);
    }
    return 0;
}

static int two_running(const kg_super_stats *st)
{
    return st->running == 2;
}

static int one_given_up(const kg_super_stats *st)
{
    return st->given_up == 1 && st->running == 0;
}

static char *slurp(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Open fds of a process, from /proc/PID/fd. */
static int count_fds(const char *path)
{
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static const char DEVS[2][KG_SUPER_DEVICE] = {"cpu:0", "cpu:1"};

/* The token arrives on fd 3 and nothing else of the server's is open;
 * the arguments name the server, device and id; SIGTERM stops them. */
static void test_start_token_args_and_stop(void **state)
{
    (void)state;
    char exe[128];
    script(exe, sizeof exe, "worker-ok",
           "dev=$5; read tok <&3; echo \"$tok\" > \"$(dirname $0)/tok.$dev\"\n"
           "echo \"$*\" > \"$(dirname $0)/args.$dev\"\n"
           "echo $$ > \"$(dirname $0)/pid.$dev\"\n"
           "exec sleep 1000");
    int leak = open("/dev/null", 0); /* without O_CLOEXEC: must not pass */
    struct exits ex = {0};
    kg_super_cfg cfg = {.exe = exe,
                        .server_url = "http://127.0.0.1:1",
                        .token = "local-token-0123456789abcdef",
                        .n = 2,
                        .devices = DEVS,
                        .id_prefix = "h-local-1-",
                        .grace_ms = 3000,
                        .on_exit = on_exit_hook,
                        .ctx = &ex};
    kg_super *s;
    kg_err err;
    assert_int_equal(kg_super_start(&s, &cfg, &err), 0);
    assert_true(wait_for(s, two_running, 5000));
    char p[512];
    for (int i = 0; i < 2; i++) {
        char *t = NULL;
        snprintf(p, sizeof p, "%s/pid.%s", dir, DEVS[i]);
        for (int k = 0; k < 250 && !(t = slurp(p)); k++)
            sleep_ms(20);
        assert_non_null(t);
        char fds[64];
        snprintf(p, sizeof p, "/proc/%ld/comm", atol(t));
        snprintf(fds, sizeof fds, "/proc/%ld/fd", atol(t));
        for (int k = 0; k < 250 && strcmp(slurp(p), "sleep\n"); k++)
            sleep_ms(20); /* exec'd: the script's own fd is gone */
        assert_int_equal(count_fds(fds), 4); /* 0 1 2 and the token pipe */
        snprintf(p, sizeof p, "%s/tok.%s", dir, DEVS[i]);
        assert_string_equal(slurp(p), "local-token-0123456789abcdef\n");
        snprintf(p, sizeof p, "%s/args.%s", dir, DEVS[i]);
        char want[512];
        snprintf(want, sizeof want,
                 "worker --server http://127.0.0.1:1 --device %s --worker-id "
                 "h-local-1-%s-1 --drain-timeout 1 --token-fd 3\n",
                 DEVS[i], DEVS[i]);
        assert_string_equal(slurp(p), want);
    }
    close(leak);
    kg_super_stats st;
    kg_super_stats_get(s, &st);
    assert_int_equal(st.configured, 2);
    assert_int_equal(st.restarts, 0);
    kg_super_stop(s);
    kg_super_stats_get(s, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(ex.n, 2);
    kg_super_free(s);
}

static int restarted(const kg_super_stats *st)
{
    return st->restarts >= 1 && st->running == 1;
}

/* A killed worker is restarted under a new id; one that ignores SIGTERM
 * is SIGKILLed (its whole process group) after the grace period. */
static void test_restart_then_kill_after_grace(void **state)
{
    (void)state;
    char exe[128];
    script(exe, sizeof exe, "worker-stubborn",
           "trap '' TERM\necho $$ >> \"$(dirname $0)/pids\"\n"
           "sleep 1000 & echo $! >> \"$(dirname $0)/pids\"\nwait");
    struct exits ex = {0};
    kg_super_cfg cfg = {.exe = exe,
                        .server_url = "http://127.0.0.1:1",
                        .n = 1,
                        .devices = DEVS,
                        .id_prefix = "h-local-2-",
                        .grace_ms = 500,
                        .backoff_min_ms = 50,
                        .on_exit = on_exit_hook,
                        .ctx = &ex};
    kg_super *s;
    kg_err err;
    assert_int_equal(kg_super_start(&s, &cfg, &err), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/pids", dir);
    char *t = NULL;
    for (int k = 0; k < 250 && !((t = slurp(p)) && strchr(t, '\n') &&
                                 strchr(strchr(t, '\n') + 1, '\n'));
         k++)
        sleep_ms(20);
    assert_non_null(t);
    pid_t first = (pid_t)atol(t);
    assert_int_equal(kill(first, SIGKILL), 0);
    assert_true(wait_for(s, restarted, 5000));
    assert_int_equal(ex.n, 1);
    assert_string_equal(ex.ids[0], "h-local-2-cpu:0-1");
    /* its sleep child, orphaned by the kill: the test's own cleanup */
    t = slurp(p);
    kill((pid_t)atol(strchr(t, '\n') + 1), SIGKILL);
    sleep_ms(300); /* the restarted script writes its pids */
    kg_super_stop(s); /* ignores SIGTERM: SIGKILL after 0.5 s */
    assert_int_equal(ex.n, 2);
    assert_string_equal(ex.ids[1], "h-local-2-cpu:0-2");
    /* the second run's shell and its sleep are gone (process group) */
    t = slurp(p);
    char *line = strchr(strchr(t, '\n') + 1, '\n') + 1;
    pid_t sh2 = (pid_t)atol(line), sl2 = (pid_t)atol(strchr(line, '\n') + 1);
    assert_true(sh2 > 0 && sl2 > 0);
    sleep_ms(100);
    assert_int_equal(kill(sh2, 0), -1);
    char st_path[64], *stat_text;
    snprintf(st_path, sizeof st_path, "/proc/%d/stat", (int)sl2);
    stat_text = slurp(st_path); /* gone, or a zombie awaiting init */
    assert_true(!stat_text || strstr(stat_text, ") Z "));
    kg_super_free(s);
}

/* A worker that keeps crashing right after it starts is given up after
 * max_fast crashes; exit status 2 (bad usage) at once. */
static void test_gives_up_on_fast_crashes(void **state)
{
    (void)state;
    char exe[128];
    script(exe, sizeof exe, "worker-crash", "exit 1");
    kg_super_cfg cfg = {.exe = exe,
                        .server_url = "http://127.0.0.1:1",
                        .n = 1,
                        .devices = DEVS,
                        .backoff_min_ms = 20,
                        .backoff_max_ms = 80,
                        .max_fast = 3};
    kg_super *s;
    kg_err err;
    assert_int_equal(kg_super_start(&s, &cfg, &err), 0);
    assert_true(wait_for(s, one_given_up, 5000));
    kg_super_stats st;
    kg_super_stats_get(s, &st);
    assert_int_equal(st.restarts, 2); /* 3 runs */
    sleep_ms(300);
    kg_super_stats_get(s, &st);
    assert_int_equal(st.restarts, 2); /* and no more */
    kg_super_free(s);

    script(exe, sizeof exe, "worker-usage", "exit 2");
    assert_int_equal(kg_super_start(&s, &cfg, &err), 0);
    assert_true(wait_for(s, one_given_up, 5000));
    kg_super_stats_get(s, &st);
    assert_int_equal(st.restarts, 0);
    kg_super_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_devices_follow_cuda_visible_devices),
        cmocka_unit_test(test_workers_spec),
        cmocka_unit_test_setup_teardown(test_start_token_args_and_stop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restart_then_kill_after_grace,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_gives_up_on_fast_crashes, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
