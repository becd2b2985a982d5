/*
 * test_sandbox.c - every test forks a child that enters the sandbox and
 * tries something; the child reports through its exit status and a pipe.
 * The test process is a subreaper, and every child it starts is tracked
 * and killed with its group in teardown, so a failing test leaves nothing
 * running.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "need_root.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/sandbox.h"
#include "worker/sandbox_json.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define CHILD_TIMEOUT_MS 10000

static kg_sandbox_filter filter;    /* default profile: W^X denied */
static kg_sandbox_filter filter_wx; /* allow_wx = 1 */
static char base[KG_SANDBOX_PATH_MAX];
static pid_t tracked[64];
static int ntracked;
static int report_fd = -1; /* in the child: where say() writes */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* In the child: a line to the parent. */
static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && report_fd >= 0 &&
        write(report_fd, buf,
              (size_t)n < sizeof buf ? (size_t)n : sizeof buf)) {
    }
}

/* In the child: counts a failed expectation and says which. */
static int nbad;
#define EXPECT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            nbad++;                                                            \
            say("FAIL %s:%d %s (errno %d %s)\n", __func__, __LINE__, #cond,    \
                errno, strerror(errno));                                       \
        }                                                                      \
    } while (0)

typedef int (*victim_fn)(void *arg);

struct child {
    pid_t pid;
    int rd; /* read end of the report pipe */
    int status;
    char out[8192];
    size_t nout;
};

static void track(pid_t pid)
{
    if (ntracked < (int)(sizeof tracked / sizeof *tracked))
        tracked[ntracked++] = pid;
}

/* Forks a child that enters the sandbox with cfg (plus the report pipe in
 * keep_fds) and exits with fn(arg). */
static void start(const kg_sandbox_cfg *cfg, victim_fn fn, void *arg,
                  struct child *c)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    int keep[16];
    int n = 0;
    for (int i = 0; i < cfg->n_keep_fds && n < 15; i++)
        keep[n++] = cfg->keep_fds[i];
    keep[n++] = p[1];
    kg_sandbox_cfg cc = *cfg;
    cc.keep_fds = keep;
    cc.n_keep_fds = n;
    memset(c, 0, sizeof *c);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        report_fd = p[1];
        kg_err e = {{0}};
        if (kg_sandbox_enter(&cc, &e) < 0) {
            say("SETUP %s\n", e.msg);
            _exit(KG_SANDBOX_EXIT_SETUP);
        }
        _exit(fn(arg));
    }
    track(pid);
    close(p[1]);
    c->pid = pid;
    c->rd = p[0];
}

/* Reads the report until EOF, or until token appears (token non-NULL). */
static int read_report(struct child *c, const char *token, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        c->out[c->nout] = 0;
        if (token && strstr(c->out, token))
            return 1;
        int left = (int)(deadline - now_ms());
        if (left <= 0)
            return 0;
        struct pollfd pf = {.fd = c->rd, .events = POLLIN};
        if (poll(&pf, 1, left) <= 0)
            continue;
        ssize_t r = read(c->rd, c->out + c->nout, sizeof c->out - 1 - c->nout);
        if (r <= 0)
            return !token;
        c->nout += (size_t)r;
    }
}

/* Waits for the child (killing its group on timeout); returns its wait
 * status. */
static int finish(struct child *c, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    read_report(c, NULL, timeout_ms);
    close(c->rd);
    for (;;) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid || (r < 0 && errno == ECHILD))
            break; /* ECHILD: reaped by kill_group, status kept there */
        if (now_ms() > deadline) {
            kg_sandbox_kill_group(c->pid, 2000, &c->status, NULL);
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
            fail_msg("child %d timed out; said: %s", (int)c->pid, c->out);
        }
        usleep(1000);
    }
    for (char *l = c->out, *nl; *l; l = nl + 1) {
        nl = strchr(l, '\n');
        if (!nl)
            nl = l + strlen(l) - 1;
        printf("    [child %d] %.*s\n", (int)c->pid, (int)(nl - l), l);
    }
    return c->status;
}

static int run(const kg_sandbox_cfg *cfg, victim_fn fn, void *arg,
               struct child *c)
{
    start(cfg, fn, arg, c);
    return finish(c, CHILD_TIMEOUT_MS);
}

static void assert_exit0(const struct child *c)
{
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0)
        fail_msg("child status 0x%x, said: %s", c->status, c->out);
}

/* A process that is gone or a zombie (nobody runs it). */
static int dead(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return !p || p[2] == 'Z' || p[2] == 'X';
}

static void default_cfg(kg_sandbox_cfg *cfg)
{
    kg_sandbox_cfg_init(cfg);
    cfg->new_netns = 1;
    cfg->filter = &filter;
    cfg->expect_parent = getpid();
}

static int group_setup(void **state)
{
    (void)state;
    kg_err e = {{0}};
    kg_sandbox_profile prof = {.allow_wx = 0, .allow_perf = 0};
    if (kg_sandbox_filter_build(&prof, &filter, &e) < 0) {
        fprintf(stderr, "filter: %s\n", e.msg);
        return -1;
    }
    prof.allow_wx = 1;
    if (kg_sandbox_filter_build(&prof, &filter_wx, &e) < 0)
        return -1;
    if (kg_sandbox_become_subreaper(&e) < 0)
        return -1;
    return kg_sandbox_mkdtemp(NULL, base, sizeof base, &e) < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kg_sandbox_reap_orphans(NULL, 0);
    kg_sandbox_filter_free(&filter);
    kg_sandbox_filter_free(&filter_wx);
    return kg_sandbox_rmtree(base, NULL) < 0 ? -1 : 0;
}

/* Runs after every test, also a failed one: nothing it started survives.
 * Only pids that are still our unreaped children are signalled, so a
 * recycled pid is never hit. */
static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < ntracked; i++) {
        pid_t r = waitpid(tracked[i], NULL, WNOHANG);
        if (r < 0)
            continue; /* not (or no longer) our child */
        /* the group outlives its reaped leader while members live */
        kg_sandbox_kill_group(tracked[i], 2000, NULL, NULL);
        if (r == 0) {
            kill(tracked[i], SIGKILL);
            waitpid(tracked[i], NULL, 0);
        }
    }
    ntracked = 0;
    kg_sandbox_reap_orphans(NULL, 0);
    return 0;
}

/* ---- seccomp --------------------------------------------------------- */

static void test_filter_build(void **state)
{
    (void)state;
    assert_non_null(filter.insns);
    assert_true(filter.len > 20 && filter.len < 4096);
    assert_int_equal(filter.wx, 1);
    assert_int_equal(filter_wx.wx, 0);
    assert_true(filter_wx.len < filter.len);
}

static int v_denied(void *arg)
{
    (void)arg;
    errno = 0;
    EXPECT(ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0 && errno == EPERM);
    EXPECT(mount("none", "/mnt", "tmpfs", 0, NULL) < 0 && errno == EPERM);
    EXPECT(umount2("/proc", MNT_DETACH) < 0 && errno == EPERM);
    EXPECT(syscall(SYS_bpf, 0, NULL, 0) < 0 && errno == EPERM);
    EXPECT(unshare(CLONE_NEWUSER) < 0 && errno == EPERM);
    EXPECT(unshare(CLONE_NEWNS) < 0 && errno == EPERM);
    EXPECT(chroot("/") < 0 && errno == EPERM);
    EXPECT(syscall(SYS_keyctl, 0, 0, 0, 0, 0) < 0 && errno == EPERM);
    EXPECT(syscall(SYS_userfaultfd, 0) < 0 && errno == EPERM);
    EXPECT(syscall(SYS_io_uring_setup, 1, NULL) < 0 && errno == EPERM);
    EXPECT(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0) < 0 &&
           errno == EPERM);
    EXPECT(syscall(SYS_setns, 0, 0) < 0 && errno == EPERM);
    char buf[8];
    struct iovec lv = {buf, sizeof buf}, rv = {buf, sizeof buf};
    EXPECT(syscall(SYS_process_vm_readv, getppid(), &lv, 1, &rv, 1, 0) < 0 &&
           errno == EPERM);
    /* clone3 cannot be inspected: ENOSYS makes libc fall back to clone */
    EXPECT(syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS);
    /* clone with a namespace flag: EPERM; if it forked, the child leaves */
    long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        _exit(0);
    EXPECT(r < 0 && errno == EPERM);
    /* packet/vsock sockets, also with garbage in the upper 32 bits */
    EXPECT(socket(AF_PACKET, SOCK_RAW, 0) < 0 && errno == EAFNOSUPPORT);
    EXPECT(socket(AF_VSOCK, SOCK_STREAM, 0) < 0 && errno == EAFNOSUPPORT);
    EXPECT(syscall(SYS_socket, (1L << 32) | AF_PACKET, SOCK_RAW, 0) < 0 &&
           errno == EAFNOSUPPORT);
    /* capabilities are gone, NO_NEW_PRIVS and the filter are on */
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int seen = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "CapBnd:", 7) ||
            !strncmp(line, "CapPrm:", 7)) {
            EXPECT(strstr(line, "0000000000000000") != NULL);
            seen++;
        }
        if (!strncmp(line, "NoNewPrivs:", 11)) {
            EXPECT(strstr(line, "1") != NULL);
            seen++;
        }
        if (!strncmp(line, "Seccomp:", 8)) {
            EXPECT(strstr(line, "2") != NULL);
            seen++;
        }
    }
    if (f)
        fclose(f);
    EXPECT(seen == 5);
    return nbad;
}

static void test_seccomp_denies(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    struct child c;
    run(&cfg, v_denied, NULL, &c);
    assert_exit0(&c);
}

static void *thread_fn(void *arg)
{
    return arg;
}

static int v_allowed(void *arg)
{
    (void)arg;
    int fd = open("f.txt", O_CREAT | O_RDWR | O_TRUNC, 0600);
    EXPECT(fd >= 0);
    EXPECT(write(fd, "abc", 3) == 3);
    char b[4] = {0};
    EXPECT(pread(fd, b, 3, 0) == 3 && !strcmp(b, "abc"));
    close(fd);
    void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(m != MAP_FAILED);
    if (m != MAP_FAILED)
        memset(m, 1, 1 << 20), munmap(m, 1 << 20);
    pthread_t t;
    void *ret = NULL;
    EXPECT(pthread_create(&t, NULL, thread_fn, (void *)7) == 0);
    EXPECT(pthread_join(t, &ret) == 0 && ret == (void *)7);
    pid_t p = fork();
    if (p == 0)
        _exit(3);
    int st = 0;
    EXPECT(p > 0 && waitpid(p, &st, 0) == p && WEXITSTATUS(st) == 3);
    p = fork();
    if (p == 0) {
        char *argv[] = {"true", NULL};
        execv("/bin/true", argv);
        _exit(99);
    }
    EXPECT(p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0);
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    EXPECT(personality(0xffffffff) != -1);
    return nbad;
}

static void test_seccomp_allows(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    char wd[KG_SANDBOX_PATH_MAX];
    assert_int_equal(kg_sandbox_mkdtemp(base, wd, sizeof wd, NULL), 0);
    cfg.workdir = wd;
    struct child c;
    run(&cfg, v_allowed, NULL, &c);
    assert_int_equal(kg_sandbox_rmtree(wd, NULL), 0);
    assert_exit0(&c);
}

static int v_kill_module(void *arg)
{
    (void)arg;
    syscall(SYS_delete_module, "kgym_no_such_module", O_NONBLOCK);
    return 0;
}

static int v_i386_abi(void *arg)
{
    (void)arg;
#if defined(__x86_64__)
    long r;
    /* getpid through the i386 entry point: other numbers, other ABI */
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    say("i386 getpid returned %ld\n", r);
#endif
    return 0;
}

static void test_seccomp_kills(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    struct child c;
    run(&cfg, v_kill_module, NULL, &c);
    assert_true(WIFSIGNALED(c.status));
    assert_int_equal(WTERMSIG(c.status), SIGSYS);
#if defined(__x86_64__)
    run(&cfg, v_i386_abi, NULL, &c);
    assert_true(WIFSIGNALED(c.status));
    assert_int_equal(WTERMSIG(c.status), SIGSYS);
#endif
}

static int v_wx(void *arg)
{
    int deny = *(int *)arg;
    size_t n = 4096;
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(deny ? m == MAP_FAILED && errno == EACCES : m != MAP_FAILED);
    m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
             0);
    EXPECT(m != MAP_FAILED);
    int r = mprotect(m, n, PROT_READ | PROT_WRITE | PROT_EXEC);
    EXPECT(deny ? r < 0 && errno == EACCES : r == 0);
    EXPECT(mprotect(m, n, PROT_READ | PROT_EXEC) == 0); /* W then X: fine */
    r = personality(READ_IMPLIES_EXEC);
    EXPECT(deny ? r < 0 && errno == EPERM : r != -1);
    r = syscall(SYS_personality, 0x80000000u | READ_IMPLIES_EXEC);
    EXPECT(deny ? r < 0 && errno == EPERM : r != -1);
    EXPECT(personality(0xffffffff) != -1);
    return nbad;
}

static void test_seccomp_wx(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    struct child c;
    int deny = 1;
    run(&cfg, v_wx, &deny, &c);
    assert_exit0(&c);
    deny = 0;
    cfg.filter = &filter_wx;
    run(&cfg, v_wx, &deny, &c);
    assert_exit0(&c);
}

/* ---- network --------------------------------------------------------- */

struct ports {
    int v4, v6;
};

static int v_network(void *arg)
{
    struct ports *p = arg;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)p->v4)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT(connect(s, (struct sockaddr *)&a, sizeof a) < 0);
    say("connect 127.0.0.1:%d: %s\n", p->v4, strerror(errno));
    close(s);
    if (p->v6 > 0) {
        s = socket(AF_INET6, SOCK_STREAM, 0);
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                                  .sin6_port = htons((uint16_t)p->v6)};
        a6.sin6_addr = in6addr_loopback;
        EXPECT(s < 0 || connect(s, (struct sockaddr *)&a6, sizeof a6) < 0);
        close(s);
    }
    /* an outside address fails as well: there is no route at all */
    s = socket(AF_INET, SOCK_DGRAM, 0);
    a.sin_addr.s_addr = htonl(0x01010101);
    a.sin_port = htons(53);
    EXPECT(sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a) < 0);
    close(s);
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    char b = 0;
    EXPECT(write(sv[0], "k", 1) == 1 && read(sv[1], &b, 1) == 1 && b == 'k');
    return nbad;
}

static int listen_on(int family, int *port)
{
    int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    }
    if (bind(s, (struct sockaddr *)&ss, len) < 0 || listen(s, 4) < 0 ||
        getsockname(s, (struct sockaddr *)&ss, &len) < 0) {
        close(s);
        return -1;
    }
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return s;
}

static void test_network(void **state)
{
    (void)state;
    struct ports p = {0, 0};
    int s4 = listen_on(AF_INET, &p.v4);
    int s6 = listen_on(AF_INET6, &p.v6);
    assert_true(s4 >= 0);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    struct child c;
    run(&cfg, v_network, &p, &c);
    close(s4);
    if (s6 >= 0)
        close(s6);
    assert_exit0(&c);
}

/* ---- rlimits --------------------------------------------------------- */

static int v_as(void *arg)
{
    (void)arg;
    void *m = mmap(NULL, 512u << 20, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(m == MAP_FAILED && errno == ENOMEM);
    void *p = malloc(512u << 20);
    EXPECT(p == NULL);
    free(p);
    return nbad;
}

static void test_rlimit_as(void **state)
{
    (void)state;
    if (UNDER_ASAN) {
        /* ASan reserves terabytes of shadow: RLIMIT_AS kills it */
        skip();
    }
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.as_bytes = 256u << 20;
    struct child c;
    run(&cfg, v_as, NULL, &c);
    assert_exit0(&c);
}

static int v_fsize(void *arg)
{
    int ignore = *(int *)arg;
    if (ignore)
        signal(SIGXFSZ, SIG_IGN);
    char buf[8192];
    memset(buf, 'x', sizeof buf);
    int fd = open("big", O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT(fd >= 0);
    ssize_t w = write(fd, buf, sizeof buf); /* partial: up to the limit */
    EXPECT(w == 4096);
    w = write(fd, buf, sizeof buf);
    EXPECT(w < 0 && errno == EFBIG);
    return nbad;
}

static void test_rlimit_fsize(void **state)
{
    (void)state;
    char wd[KG_SANDBOX_PATH_MAX];
    assert_int_equal(kg_sandbox_mkdtemp(base, wd, sizeof wd, NULL), 0);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.workdir = wd;
    cfg.fsize_bytes = 4096;
    struct child c;
    int ignore = 0;
    run(&cfg, v_fsize, &ignore, &c);
    assert_true(WIFSIGNALED(c.status));
    assert_int_equal(WTERMSIG(c.status), SIGXFSZ);
    ignore = 1;
    run(&cfg, v_fsize, &ignore, &c);
    assert_int_equal(kg_sandbox_rmtree(wd, NULL), 0);
    assert_exit0(&c);
}

static int v_nofile(void *arg)
{
    (void)arg;
    int n = 0;
    while (n < 1000 && open("/dev/null", O_RDONLY) >= 0)
        n++;
    EXPECT(errno == EMFILE);
    say("opened %d fds\n", n);
    /* 0,1,2 and the report pipe are open: 16 - 4 new ones fit */
    EXPECT(n == 12);
    return nbad;
}

static void test_rlimit_nofile(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.nofile = 16;
    struct child c;
    run(&cfg, v_nofile, NULL, &c);
    assert_exit0(&c);
}

static int v_spin(void *arg)
{
    (void)arg;
    volatile unsigned long x = 0;
    for (;;)
        x++;
    return 0;
}

static void test_rlimit_cpu(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.cpu_seconds = 1;
    struct child c;
    double t0 = now_ms();
    run(&cfg, v_spin, NULL, &c);
    double ms = now_ms() - t0;
    assert_true(WIFSIGNALED(c.status));
    assert_int_equal(WTERMSIG(c.status), SIGXCPU);
    printf("    CPU-bound child killed by SIGXCPU after %.0f ms wall\n", ms);
    assert_true(ms < 5000);
}

static int v_core(void *arg)
{
    (void)arg;
    struct rlimit r;
    EXPECT(getrlimit(RLIMIT_CORE, &r) == 0 && r.rlim_cur == 0 &&
           r.rlim_max == 0);
    signal(SIGABRT, SIG_DFL);
    if (nbad == 0)
        abort();
    return nbad;
}

static void test_no_core(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    struct child c;
    run(&cfg, v_core, NULL, &c);
    assert_true(WIFSIGNALED(c.status));
    assert_int_equal(WTERMSIG(c.status), SIGABRT);
    assert_false(WCOREDUMP(c.status));
}

/* ---- fds, stdio, env, workdir ----------------------------------------- */

static int v_fds(void *arg)
{
    int *fds = arg; /* [leaked, kept] */
    EXPECT(fcntl(fds[0], F_GETFD) < 0 && errno == EBADF);
    EXPECT(fcntl(fds[1], F_GETFD) == 0); /* open, FD_CLOEXEC cleared */
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int others = 0;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd <= 2 || fd == fds[1] || fd == dirfd(d) ||
            fd == report_fd)
            continue;
        say("unexpected fd %d\n", fd);
        others++;
    }
    if (d)
        closedir(d);
    EXPECT(others == 0);
    /* stdin is /dev/null */
    char b;
    EXPECT(read(0, &b, 1) == 0);
    /* stdout goes to the pipe the parent gave */
    EXPECT(write(1, "to-stdout\n", 10) == 10);
    return nbad;
}

static void test_fds(void **state)
{
    (void)state;
    int fds[2];
    fds[0] = open("/dev/null", O_RDONLY);             /* leaked, not kept */
    fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC); /* kept */
    int out[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.keep_fds = &fds[1];
    cfg.n_keep_fds = 1;
    cfg.stdout_fd = out[1];
    struct child c;
    start(&cfg, v_fds, fds, &c);
    close(out[1]);
    finish(&c, CHILD_TIMEOUT_MS);
    char buf[64] = {0};
    ssize_t n = read(out[0], buf, sizeof buf - 1);
    close(out[0]);
    close(fds[0]);
    close(fds[1]);
    assert_exit0(&c);
    assert_true(n == 10 && !strcmp(buf, "to-stdout\n"));
}

static int v_env(void *arg)
{
    const char *const *want = arg;
    int n = 0;
    for (char **e = environ; *e; e++, n++) {
        EXPECT(want[n] != NULL);
        if (!want[n])
            break;
        if (strcmp(*e, want[n]))
            say("env[%d] = %s, want %s\n", n, *e, want[n]), nbad++;
    }
    EXPECT(want[n] == NULL);
    char cwd[KG_SANDBOX_PATH_MAX];
    EXPECT(getcwd(cwd, sizeof cwd) && !strcmp(cwd, getenv("HOME")));
    return nbad;
}

static void test_env(void **state)
{
    (void)state;
    char wd[KG_SANDBOX_PATH_MAX], home[600], tmp[600];
    assert_int_equal(kg_sandbox_mkdtemp(base, wd, sizeof wd, NULL), 0);
    snprintf(home, sizeof home, "HOME=%s", wd);
    snprintf(tmp, sizeof tmp, "TMPDIR=%s", wd);
    const char *env[] = {"A=1", "HOME=/nowhere", "PATH=/usr/bin",
                         "TMPDIR=/elsewhere", NULL};
    const char *want[] = {"A=1", "PATH=/usr/bin", home, tmp, NULL};
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.workdir = wd;
    cfg.env = env;
    struct child c;
    run(&cfg, v_env, (void *)want, &c);
    assert_int_equal(kg_sandbox_rmtree(wd, NULL), 0);
    assert_exit0(&c);
}

static int v_plant(void *arg)
{
    const char *outside = arg;
    EXPECT(symlink(outside, "link-to-outside-file") == 0);
    EXPECT(mkdir("d", 0700) == 0);
    EXPECT(symlink("/etc", "d/link-to-etc") == 0);
    int fd = open("d/f", O_CREAT | O_WRONLY, 0600);
    EXPECT(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);
    EXPECT(mkdir("d/locked", 0700) == 0);
    fd = open("d/locked/f", O_CREAT | O_WRONLY, 0600);
    close(fd);
    EXPECT(chmod("d/locked", 0) == 0);
    EXPECT(chmod("d", 0500) == 0);
    /* deep nesting: rmtree must not need one fd per level */
    for (int i = 0; i < 2000; i++)
        if (mkdir("n", 0700) < 0 || chdir("n") < 0) {
            EXPECT(0);
            break;
        }
    fd = open("deep", O_CREAT | O_WRONLY, 0600);
    close(fd);
    return nbad;
}

static void test_workdir_rmtree(void **state)
{
    (void)state;
    char wd[KG_SANDBOX_PATH_MAX], outside[600];
    assert_int_equal(kg_sandbox_mkdtemp(base, wd, sizeof wd, NULL), 0);
    struct stat st;
    assert_int_equal(stat(wd, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(outside, sizeof outside, "%s/outside.txt", base);
    FILE *f = fopen(outside, "w");
    assert_non_null(f);
    fputs("keep me", f);
    fclose(f);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.workdir = wd;
    struct child c;
    run(&cfg, v_plant, outside, &c);
    assert_exit0(&c);
    kg_err e = {{0}};
    double t0 = now_ms();
    int r = kg_sandbox_rmtree(wd, &e);
    printf("    rmtree of 2000 nested dirs + planted links: %.0f ms\n",
           now_ms() - t0);
    if (r < 0)
        fail_msg("rmtree: %s", e.msg);
    assert_int_equal(lstat(wd, &st), -1);
    char buf[16] = {0};
    f = fopen(outside, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "keep me");
    assert_int_equal(stat("/etc/passwd", &st), 0);
    unlink(outside);
    /* a missing path is not an error; a file is removed */
    assert_int_equal(kg_sandbox_rmtree(wd, NULL), 0);
}

/* ---- processes ------------------------------------------------------- */

/* Forks three sleepers, one of which calls setsid and double-forks (a
 * daemon that left the group), reports all pids, then sleeps. */
static int v_family(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2; i++) {
        pid_t p = fork();
        if (p == 0) {
            for (;;)
                pause();
        }
        say("pid %d\n", (int)p);
    }
    int pp[2];
    EXPECT(pipe(pp) == 0);
    pid_t p = fork();
    if (p == 0) {
        setsid();
        pid_t q = fork();
        if (q == 0) {
            for (;;)
                pause();
        }
        if (write(pp[1], &q, sizeof q) != sizeof q)
            _exit(1);
        _exit(0);
    }
    pid_t q = -1;
    EXPECT(read(pp[0], &q, sizeof q) == sizeof q);
    waitpid(p, NULL, 0);
    say("escaped %d\n", (int)q);
    say("READY\n");
    for (;;)
        pause();
    return 0;
}

static void test_kill_group(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    struct child c;
    start(&cfg, v_family, NULL, &c);
    assert_true(read_report(&c, "READY\n", CHILD_TIMEOUT_MS));
    pid_t pids[3];
    int n = 0;
    for (char *s = c.out; (s = strstr(s, "pid ")) && n < 2; s += 4)
        pids[n++] = (pid_t)atoi(s + 4);
    char *esc = strstr(c.out, "escaped ");
    assert_non_null(esc);
    pid_t escaped = (pid_t)atoi(esc + 8);
    assert_int_equal(n, 2);
    assert_true(escaped > 0);
    assert_int_equal(getpgid(c.pid), c.pid); /* its own group */
    assert_int_equal(getsid(c.pid), c.pid);  /* and session */

    int status = -1;
    kg_err e = {{0}};
    assert_int_equal(kg_sandbox_kill_group(c.pid, 5000, &status, &e), 0);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    for (int i = 0; i < n; i++)
        assert_true(dead(pids[i]));
    /* the setsid'd daemon left the group: kill_group cannot see it... */
    assert_false(dead(escaped));
    /* ...but it reparented to us, the subreaper */
    assert_int_equal(kg_sandbox_reap_orphans(NULL, 0), 1);
    assert_true(dead(escaped));
    close(c.rd);
}

static int v_wait(void *arg)
{
    (void)arg;
    EXPECT(prctl(PR_GET_PDEATHSIG, &(int){0}) == 0);
    say("READY\n");
    for (;;)
        pause();
    return 0;
}

static void test_pdeathsig(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid_t mid = fork();
    assert_true(mid >= 0);
    if (mid == 0) {
        /* the middle process: starts the sandboxed child, then waits */
        kg_sandbox_cfg cfg;
        default_cfg(&cfg); /* expect_parent = this process */
        cfg.keep_fds = &p[1];
        cfg.n_keep_fds = 1;
        pid_t kid = fork();
        if (kid == 0) {
            report_fd = p[1];
            if (kg_sandbox_enter(&cfg, NULL) < 0)
                _exit(KG_SANDBOX_EXIT_SETUP);
            say("kid %d\n", (int)getpid());
            for (;;)
                pause();
        }
        for (;;)
            pause();
    }
    track(mid);
    close(p[1]);
    struct child c = {.pid = mid, .rd = p[0]};
    assert_true(read_report(&c, "\n", CHILD_TIMEOUT_MS));
    pid_t kid = (pid_t)atoi(c.out + 4);
    assert_true(kid > 0);
    track(kid);
    kill(mid, SIGKILL);
    waitpid(mid, NULL, 0);
    /* kid got SIGKILL when mid died; it reparented to us (subreaper) */
    int st = 0;
    double t0 = now_ms();
    while (waitpid(kid, &st, WNOHANG) == 0 && now_ms() - t0 < 5000)
        usleep(1000);
    close(p[0]);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void test_pdeathsig_race(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    /* as if the parent had died before the prctl: our parent is not it */
    cfg.expect_parent = getpid() + 100000;
    struct child c;
    run(&cfg, v_wait, NULL, &c);
    assert_true(WIFEXITED(c.status));
    assert_int_equal(WEXITSTATUS(c.status), KG_SANDBOX_EXIT_SETUP);
    assert_non_null(strstr(c.out, "already exited"));
}

/* Forks sleepers until fork fails or 200 succeed; reports the count. */
static int v_forks(void *arg)
{
    int limit = arg ? *(int *)arg : 200;
    int n = 0;
    for (int i = 0; i < limit; i++) {
        pid_t p = fork();
        if (p == 0) {
            for (;;)
                pause();
        }
        if (p < 0)
            break;
        n++;
    }
    say("forked %d (%s)\n", n, n < limit ? strerror(errno) : "no failure");
    say("READY\n");
    for (;;)
        pause();
    return 0;
}

static int forked(const struct child *c)
{
    const char *s = strstr(c->out, "forked ");
    return s ? atoi(s + 7) : -1;
}

static void test_nproc_uid(void **state)
{
    (void)state;
    NEED_ROOT("switching uid");
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.nproc = 8;
    cfg.uid = 65534;
    cfg.gid = 65534;
    struct child c;
    start(&cfg, v_forks, NULL, &c);
    int ok = read_report(&c, "READY\n", CHILD_TIMEOUT_MS);
    kg_sandbox_kill_group(c.pid, 5000, &c.status, NULL);
    finish(&c, CHILD_TIMEOUT_MS);
    assert_true(ok);
    /* the limit counts every process of uid 65534, the child included */
    assert_true(forked(&c) >= 0 && forked(&c) < 8);
}

static void test_nproc_root_unbound(void **state)
{
    (void)state;
    NEED_ROOT("RLIMIT_NPROC of uid 0");
    /* documents a kernel rule: RLIMIT_NPROC never binds uid 0, even
     * without capabilities (use the pids cgroup or a uid) */
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.nproc = 4;
    int limit = 20;
    struct child c;
    start(&cfg, v_forks, &limit, &c);
    int ok = read_report(&c, "READY\n", CHILD_TIMEOUT_MS);
    kg_sandbox_kill_group(c.pid, 5000, &c.status, NULL);
    finish(&c, CHILD_TIMEOUT_MS);
    assert_true(ok);
    assert_int_equal(forked(&c), 20);
}

static int v_uid(void *arg)
{
    (void)arg;
    EXPECT(getuid() == 65534 && geteuid() == 65534 && getgid() == 65534);
    gid_t g[4];
    EXPECT(getgroups(4, g) == 0);
    int sig = 0;
    EXPECT(prctl(PR_GET_PDEATHSIG, &sig) == 0 && sig == SIGKILL);
    EXPECT(kill(1, 0) < 0 && errno == EPERM);
    EXPECT(kill(getppid(), 0) < 0 && errno == EPERM);
    return nbad;
}

static void test_uid_switch(void **state)
{
    (void)state;
    NEED_ROOT("switching uid");
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.uid = 65534;
    cfg.gid = 65534;
    struct child c;
    run(&cfg, v_uid, NULL, &c);
    assert_exit0(&c);
}

/* ---- private mounts: tmpfs /tmp (quota), read-only root, kept dirs --- */

struct mounts_arg {
    char wd[KG_SANDBOX_PATH_MAX + 16], cache[KG_SANDBOX_PATH_MAX + 16];
    char marker[KG_SANDBOX_PATH_MAX]; /* a host file in /tmp */
    char ro_probe[KG_SANDBOX_PATH_MAX + 16]; /* a path in a host dir */
    uint64_t quota;
};

/* First component of p below /tmp/, or "" when p is not below /tmp. */
static void tmp_top(const char *p, char *out, size_t n)
{
    out[0] = 0;
    if (strncmp(p, "/tmp/", 5))
        return;
    snprintf(out, n, "%.*s", (int)strcspn(p + 5, "/"), p + 5);
}

static int v_private_tmp(void *arg)
{
    const struct mounts_arg *a = arg;
    char cwd[KG_SANDBOX_PATH_MAX + 16], p[KG_SANDBOX_PATH_MAX + 64];
    EXPECT(getcwd(cwd, sizeof cwd) && !strcmp(cwd, a->wd));
    EXPECT(getenv("TMPDIR") && !strcmp(getenv("TMPDIR"), a->wd));
    EXPECT(umask(0) == 027);
    /* /tmp holds only the way to our own dirs: not the host's marker */
    EXPECT(access(a->marker, F_OK) < 0 && errno == ENOENT);
    char top_wd[256], top_cache[256];
    tmp_top(a->wd, top_wd, sizeof top_wd);
    tmp_top(a->cache, top_cache, sizeof top_cache);
    DIR *d = opendir("/tmp");
    EXPECT(d != NULL);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (strcmp(de->d_name, top_wd) && strcmp(de->d_name, top_cache)) {
            nbad++;
            say("FAIL /tmp shows %s\n", de->d_name);
        }
    }
    if (d)
        closedir(d);
    /* /tmp, /var/tmp and /dev/shm are writable, and ours */
    const char *places[] = {"/tmp", "/var/tmp", "/dev/shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/kgym-test-private-%d", places[i],
                 (int)getppid());
        int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600);
        EXPECT(fd >= 0 && write(fd, "x", 1) == 1);
        if (fd >= 0)
            close(fd);
    }
    /* the kept dir is the host's, and writable */
    snprintf(p, sizeof p, "%s/from-child", a->cache);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0666);
    EXPECT(fd >= 0 && write(fd, "cached", 6) == 6);
    if (fd >= 0)
        close(fd);
    /* everything else is read-only (or not ours to write) */
    fd = open(a->ro_probe, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT(fd < 0 && (errno == EROFS || errno == EACCES));
    /* the quota: writes past it fail with ENOSPC */
    static char block[1 << 20];
    memset(block, 0xab, sizeof block);
    fd = open("fill", O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT(fd >= 0);
    uint64_t total = 0;
    ssize_t w = 0;
    while (fd >= 0 && total < 4 * a->quota &&
           (w = write(fd, block, sizeof block)) > 0)
        total += (uint64_t)w;
    EXPECT(w < 0 && errno == ENOSPC);
    EXPECT(total <= a->quota && total >= a->quota / 2);
    if (fd >= 0)
        close(fd);
    say("filled %llu\n", (unsigned long long)total);
    return nbad;
}

static void mounts_setup(struct mounts_arg *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->wd, sizeof a->wd, "%s/wd", base);
    snprintf(a->cache, sizeof a->cache, "%s/cache", base);
    snprintf(a->marker, sizeof a->marker, "/tmp/kgym-test-marker-%d",
             (int)getpid());
    snprintf(a->ro_probe, sizeof a->ro_probe, "%s/ro-probe", base);
    a->quota = 8 << 20;
    assert_int_equal(mkdir(a->wd, 0700), 0);
    assert_int_equal(mkdir(a->cache, 0700), 0);
    assert_int_equal(chmod(a->cache, 0777), 0);
    int fd = open(a->marker, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
}

static void mounts_cleanup(struct mounts_arg *a)
{
    unlink(a->marker);
    kg_sandbox_rmtree(a->wd, NULL);
    kg_sandbox_rmtree(a->cache, NULL);
    unlink(a->ro_probe);
}

static void test_private_tmp(void **state)
{
    (void)state;
    NEED_ROOT("mount namespace and bind mounts");
    struct mounts_arg a;
    mounts_setup(&a);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.workdir = a.wd;
    cfg.uid = 65534;
    cfg.gid = 65534;
    cfg.umask = 027;
    cfg.private_tmp = 1;
    cfg.tmp_bytes = a.quota;
    cfg.readonly_root = 1;
    cfg.keep_paths[0] = a.cache;
    struct child c;
    run(&cfg, v_private_tmp, &a, &c);
    /* the host is untouched: its marker is there, the child's files are
     * not, the workdir is empty; the kept dir got the child's file */
    char p[KG_SANDBOX_PATH_MAX + 64];
    int host_ok = access(a.marker, F_OK) == 0;
    int leaked = 0;
    const char *places[] = {"/tmp", "/var/tmp", "/dev/shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/kgym-test-private-%d", places[i],
                 (int)getpid());
        if (access(p, F_OK) == 0) {
            leaked++;
            unlink(p);
        }
    }
    snprintf(p, sizeof p, "%s/fill", a.wd);
    int wd_clean = access(p, F_OK) < 0;
    snprintf(p, sizeof p, "%s/from-child", a.cache);
    int cached = access(p, F_OK) == 0;
    mounts_cleanup(&a);
    assert_exit0(&c);
    assert_true(host_ok);
    assert_int_equal(leaked, 0);
    assert_true(wd_clean);
    assert_true(cached);
}

static int v_readonly(void *arg)
{
    const struct mounts_arg *a = arg;
    char p[KG_SANDBOX_PATH_MAX + 64];
    /* still uid 0 (no capabilities): only the read-only flag stops it */
    int fd = open(a->ro_probe, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT(fd < 0 && errno == EROFS);
    EXPECT(mkdir("/kgym-test-ro", 0700) < 0 && errno == EROFS);
    /* device nodes stay usable */
    fd = open("/dev/null", O_WRONLY);
    EXPECT(fd >= 0 && write(fd, "x", 1) == 1);
    if (fd >= 0)
        close(fd);
    snprintf(p, sizeof p, "%s/from-child", a->cache);
    fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT(fd >= 0);
    if (fd >= 0)
        close(fd);
    /* without private_tmp, /tmp is the host's: read-only too */
    snprintf(p, sizeof p, "/tmp/kgym-test-ro-%d", (int)getppid());
    fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT(fd < 0 && errno == EROFS);
    return nbad;
}

static void test_readonly_root(void **state)
{
    (void)state;
    NEED_ROOT("mount namespace and bind mounts");
    struct mounts_arg a;
    mounts_setup(&a);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.readonly_root = 1;
    cfg.keep_paths[0] = a.cache;
    struct child c;
    run(&cfg, v_readonly, &a, &c);
    char p[KG_SANDBOX_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/from-child", a.cache);
    int cached = access(p, F_OK) == 0;
    int probe = access(a.ro_probe, F_OK) == 0;
    mounts_cleanup(&a);
    assert_exit0(&c);
    assert_true(cached);
    assert_false(probe);
}

/* ---- the new root: what the child sees of the host -------------------- */

struct view_arg {
    struct mounts_arg m;
    char dir[256];     /* /opt/kgym-test-view-PID: a host dir, world-readable */
    char secret[300];  /* a world-readable file in it */
    char allowed[300]; /* <dir>/allowed, given as a view path */
    char data[300];    /* /var/lib/...: a data dir's world-readable file */
    char home[300];    /* /home/...; "" without /home */
    char root[300];    /* /root/...: mode 0600, root's */
};

static int v_host_view(void *arg)
{
    const struct view_arg *a = arg;
    char p[KG_SANDBOX_PATH_MAX + 64], buf[64];
    /* the host's files outside the view are not there at all */
    const char *hidden[] = {a->secret, a->data, a->home, a->root,
                            "/etc/shadow", "/etc/hostname", a->m.marker};
    for (size_t i = 0; i < sizeof hidden / sizeof *hidden; i++) {
        if (!hidden[i][0])
            continue;
        int fd = open(hidden[i], O_RDONLY);
        if (fd >= 0 || errno != ENOENT) {
            nbad++;
            say("FAIL %s is visible (fd %d, errno %d)\n", hidden[i], fd,
                errno);
        }
        if (fd >= 0)
            close(fd);
    }
    /* what it needs is: a view path, the system, /etc's few, /dev, /proc */
    snprintf(p, sizeof p, "%s/ok", a->allowed);
    int fd = open(p, O_RDONLY);
    EXPECT(fd >= 0 && read(fd, buf, sizeof buf) == 2 && !memcmp(buf, "ok", 2));
    if (fd >= 0)
        close(fd);
    EXPECT(access("/etc/passwd", R_OK) == 0);
    EXPECT(access("/etc/ld.so.cache", R_OK) == 0);
    EXPECT(access("/proc/self/status", R_OK) == 0);
    fd = open("/dev/null", O_WRONLY);
    EXPECT(fd >= 0 && write(fd, "x", 1) == 1);
    if (fd >= 0)
        close(fd);
    fd = open("/dev/urandom", O_RDONLY);
    EXPECT(fd >= 0 && read(fd, buf, 8) == 8);
    if (fd >= 0)
        close(fd);
    pid_t pid = fork(); /* through the /bin link, the loader and libc */
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st = -1;
    EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0);
    /* its own dirs are writable, the rest is not */
    char cwd[KG_SANDBOX_PATH_MAX + 16];
    EXPECT(getcwd(cwd, sizeof cwd) && !strcmp(cwd, a->m.wd));
    fd = open("mine", O_CREAT | O_WRONLY, 0600);
    EXPECT(fd >= 0);
    if (fd >= 0)
        close(fd);
    snprintf(p, sizeof p, "%s/from-%d", a->m.cache, (int)getuid());
    fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0666);
    EXPECT(fd >= 0);
    if (fd >= 0)
        close(fd);
    fd = open("/tmp/x", O_CREAT | O_WRONLY, 0600);
    EXPECT(fd >= 0);
    if (fd >= 0)
        close(fd);
    EXPECT(mkdir("/kgym-test-view", 0700) < 0 &&
           (errno == EROFS || errno == EACCES));
    snprintf(p, sizeof p, "%s/new", a->allowed);
    EXPECT(open(p, O_CREAT | O_WRONLY, 0600) < 0 &&
           (errno == EROFS || errno == EACCES));
    /* / holds the system's names, and /opt for the view path */
    static const char *const ok[] = {"usr", "bin",  "sbin", "lib", "lib32",
                                     "lib64", "libx32", "etc", "proc", "sys",
                                     "dev", "tmp",  "var",  "opt", NULL};
    DIR *d = opendir("/");
    EXPECT(d != NULL);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int known = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
        for (int i = 0; ok[i] && !known; i++)
            known = !strcmp(de->d_name, ok[i]);
        if (!known) {
            nbad++;
            say("FAIL / shows %s\n", de->d_name);
        }
    }
    if (d)
        closedir(d);
    return nbad;
}

/* Writes text into a new file path (mode), making its directory (0755). */
static void plant(const char *dir, const char *path, mode_t mode,
                  const char *text)
{
    if (dir)
        assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_host_view(void **state)
{
    (void)state;
    NEED_ROOT("a mount namespace and pivot_root");
    struct view_arg a;
    memset(&a, 0, sizeof a);
    mounts_setup(&a.m);
    int me = (int)getpid();
    char d2[256], d3[256];
    snprintf(a.dir, sizeof a.dir, "/opt/kgym-test-view-%d", me);
    snprintf(a.secret, sizeof a.secret, "%s/secret", a.dir);
    snprintf(a.allowed, sizeof a.allowed, "%s/allowed", a.dir);
    snprintf(d2, sizeof d2, "/var/lib/kgym-test-view-%d", me);
    snprintf(a.data, sizeof a.data, "%s/task.py", d2);
    snprintf(a.root, sizeof a.root, "/root/kgym-test-view-%d", me);
    struct stat st;
    if (stat("/home", &st) == 0) {
        snprintf(d3, sizeof d3, "/home/kgym-test-view-%d", me);
        snprintf(a.home, sizeof a.home, "%s/notes", d3);
        plant(d3, a.home, 0644, "home");
    }
    assert_true(mkdir("/opt", 0755) == 0 || errno == EEXIST);
    plant(a.dir, a.secret, 0644, "secret");
    char ok[320];
    snprintf(ok, sizeof ok, "%s/ok", a.allowed);
    plant(a.allowed, ok, 0644, "ok");
    plant(d2, a.data, 0644, "data");
    plant(NULL, a.root, 0600, "root");
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.workdir = a.m.wd;
    cfg.private_tmp = 1;
    cfg.readonly_root = 1;
    cfg.new_root = 1;
    cfg.keep_paths[0] = a.m.cache;
    cfg.view_paths[0] = a.allowed;
    cfg.view_paths[1] = "/nonexistent/kgym-test-view"; /* skipped */
    /* as a candidate's uid, and as uid 0 without capabilities, which
     * could read even a 0600 file of root's */
    struct child c1, c2;
    cfg.uid = cfg.gid = 65534;
    run(&cfg, v_host_view, &a, &c1);
    cfg.uid = cfg.gid = -1;
    run(&cfg, v_host_view, &a, &c2);
    char p[KG_SANDBOX_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/from-65534", a.m.cache);
    int cached = access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s/from-0", a.m.cache);
    cached += access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s/new", a.allowed);
    int wrote = access(p, F_OK) == 0;
    unlink(a.root);
    kg_sandbox_rmtree(a.dir, NULL);
    kg_sandbox_rmtree(d2, NULL);
    if (a.home[0])
        kg_sandbox_rmtree(d3, NULL);
    mounts_cleanup(&a.m);
    assert_exit0(&c1);
    assert_exit0(&c2);
    assert_int_equal(cached, 2);
    assert_false(wrote);
}

static void test_private_tmp_bad_config(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    kg_err e = {{0}};
    /* checked before anything changes, so this process can run it */
    kg_sandbox_cfg_init(&cfg);
    cfg.private_tmp = 1;
    assert_int_equal(kg_sandbox_enter(&cfg, &e), KG_EINVAL);
    assert_non_null(strstr(e.msg, "workdir"));
    kg_sandbox_cfg_init(&cfg);
    cfg.keep_paths[0] = "relative/path";
    assert_int_equal(kg_sandbox_enter(&cfg, &e), KG_EINVAL);
    assert_non_null(strstr(e.msg, "keep path"));
    kg_sandbox_cfg_init(&cfg);
    cfg.new_root = 1;
    assert_int_equal(kg_sandbox_enter(&cfg, &e), KG_EINVAL);
    assert_non_null(strstr(e.msg, "new_root needs private_tmp"));
    kg_sandbox_cfg_init(&cfg);
    cfg.view_paths[3] = "usr";
    assert_int_equal(kg_sandbox_enter(&cfg, &e), KG_EINVAL);
    assert_non_null(strstr(e.msg, "view path"));
}

static void test_json_private_fields(void **state)
{
    (void)state;
    kg_sandbox_cfg cfg;
    kg_sandbox_json_store st;
    int en;
    kg_err e = {{0}};
    json_error_t je;
    json_t *s = json_loads(
        "{\"workdir\":\"/w\",\"private_tmp\":true,\"tmp_bytes\":1048576,"
        "\"readonly_root\":true,\"umask\":7,\"keep_paths\":[\"/c1\",\"/c2\"],"
        "\"uid\":65401,\"gid\":65400,\"new_root\":true,"
        "\"view_paths\":[\"/v1\"]}",
        0, &je);
    assert_non_null(s);
    assert_int_equal(kg_sandbox_cfg_from_json(s, NULL, &cfg, &st, &en, &e), 0);
    json_decref(s);
    assert_int_equal(cfg.private_tmp, 1);
    assert_int_equal(cfg.readonly_root, 1);
    assert_int_equal(cfg.tmp_bytes, 1048576);
    assert_int_equal(cfg.umask, 7);
    assert_string_equal(cfg.keep_paths[0], "/c1");
    assert_string_equal(cfg.keep_paths[1], "/c2");
    assert_null(cfg.keep_paths[2]);
    assert_int_equal(cfg.uid, 65401);
    assert_int_equal(cfg.new_root, 1);
    assert_string_equal(cfg.view_paths[0], "/v1");
    assert_null(cfg.view_paths[1]);
    /* absent: off, umask kept */
    s = json_loads("{}", 0, &je);
    assert_int_equal(kg_sandbox_cfg_from_json(s, NULL, &cfg, &st, &en, &e), 0);
    json_decref(s);
    assert_int_equal(cfg.private_tmp, 0);
    assert_int_equal(cfg.readonly_root, 0);
    assert_int_equal(cfg.umask, -1);
    assert_null(cfg.keep_paths[0]);
    assert_int_equal(cfg.new_root, 0);
    assert_null(cfg.view_paths[0]);
    /* bad values: a clear error each */
    const char *bad[][2] = {
        {"{\"umask\":512}", "umask"},
        {"{\"umask\":\"007\"}", "umask"},
        {"{\"tmp_bytes\":0}", "tmp_bytes"},
        {"{\"tmp_bytes\":-5}", "tmp_bytes"},
        {"{\"keep_paths\":\"/c\"}", "keep_paths"},
        {"{\"keep_paths\":[\"rel\"]}", "keep_paths"},
        {"{\"keep_paths\":[1]}", "keep_paths"},
        {"{\"keep_paths\":[\"/a\",\"/b\",\"/c\",\"/d\",\"/e\"]}", "keep_paths"},
        {"{\"view_paths\":\"/v\"}", "view_paths"},
        {"{\"view_paths\":[\"v\"]}", "view_paths"},
        {"{\"view_paths\":[null]}", "view_paths"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s = json_loads(bad[i][0], 0, &je);
        assert_non_null(s);
        int rc = kg_sandbox_cfg_from_json(s, NULL, &cfg, &st, &en, &e);
        json_decref(s);
        if (rc != KG_EINVAL || !strstr(e.msg, bad[i][1]))
            fail_msg("%s: rc %d, %s", bad[i][0], rc, e.msg);
    }
}

/* ---- cgroups --------------------------------------------------------- */

static kg_sandbox_cgroups cgs;
static int cgs_probed, cgs_ok;

static int cgroups_usable(int need_mem, int need_pids)
{
    if (!cgs_probed) {
        cgs_probed = 1;
        cgs_ok = kg_sandbox_cgroup_probe(&cgs, NULL) == 0;
        printf("    %s\n", kg_sandbox_cgroup_reason(&cgs));
    }
    if ((need_mem && !cgs.mem_version) || (need_pids && !cgs.pids_version)) {
        /* not root: the likeliest reason, which CI may not skip for */
        if (getuid() != 0)
            NEED_ROOT("a writable cgroup");
        printf("    skipped: %s\n", kg_sandbox_cgroup_reason(&cgs));
        return 0;
    }
    return 1;
}

static int v_hog(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1024; i++) { /* 1 GiB at most */
        char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 2;
        memset(p, i, 1 << 20);
    }
    return 0;
}

static void test_cgroup_memory(void **state)
{
    (void)state;
    if (!cgroups_usable(1, 0))
        skip();
    kg_sandbox_cgroup g;
    kg_err e = {{0}};
    char name[64];
    snprintf(name, sizeof name, "kgym-test-mem-%d", (int)getpid());
    if (kg_sandbox_cgroup_open(&cgs, name, 64u << 20, 64, &g, &e) < 0)
        fail_msg("cgroup_open: %s", e.msg);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    kg_sandbox_cgroup_attach(&g, &cfg);
    struct child c;
    run(&cfg, v_hog, NULL, &c);
    long ooms = kg_sandbox_cgroup_oom_kills(&g);
    int r = kg_sandbox_cgroup_close(&g, 5000, &e);
    if (r < 0)
        fail_msg("cgroup_close: %s", e.msg);
    printf("    64 MiB group: child status 0x%x, oom_kill %ld\n", c.status,
           ooms);
    assert_true(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL);
    assert_true(ooms >= 1);
}

static void test_cgroup_pids(void **state)
{
    (void)state;
    if (!cgroups_usable(0, 1))
        skip();
    kg_sandbox_cgroup g;
    kg_err e = {{0}};
    char name[64];
    snprintf(name, sizeof name, "kgym-test-pids-%d", (int)getpid());
    if (kg_sandbox_cgroup_open(&cgs, name, 0, 16, &g, &e) < 0)
        fail_msg("cgroup_open: %s", e.msg);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    kg_sandbox_cgroup_attach(&g, &cfg);
    int limit = 1000; /* a bounded fork bomb */
    struct child c;
    start(&cfg, v_forks, &limit, &c);
    int ok = read_report(&c, "READY\n", CHILD_TIMEOUT_MS);
    int inside = kg_sandbox_cgroup_count(&g);
    /* cgroup_close alone, no process-group kill: the group is the net */
    int r = kg_sandbox_cgroup_close(&g, 5000, &e);
    finish(&c, CHILD_TIMEOUT_MS);
    if (r < 0)
        fail_msg("cgroup_close: %s", e.msg);
    assert_true(ok);
    printf("    pids.max 16: %d forks succeeded, %d processes in the group\n",
           forked(&c), inside);
    assert_true(forked(&c) >= 1 && forked(&c) <= 15);
    assert_int_equal(inside, forked(&c) + 1);
    assert_true(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL);
    assert_int_equal(kg_sandbox_reap_orphans(NULL, 0), 0);
}

/* A setsid'd daemon escapes the process group but not the cgroup. */
static void test_cgroup_catches_escapee(void **state)
{
    (void)state;
    if (!cgroups_usable(0, 1))
        skip();
    kg_sandbox_cgroup g;
    kg_err e = {{0}};
    char name[64];
    snprintf(name, sizeof name, "kgym-test-esc-%d", (int)getpid());
    if (kg_sandbox_cgroup_open(&cgs, name, 0, 64, &g, &e) < 0)
        fail_msg("cgroup_open: %s", e.msg);
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    kg_sandbox_cgroup_attach(&g, &cfg);
    struct child c;
    start(&cfg, v_family, NULL, &c);
    int ok = read_report(&c, "READY\n", CHILD_TIMEOUT_MS);
    char *esc = strstr(c.out, "escaped ");
    pid_t escaped = esc ? (pid_t)atoi(esc + 8) : -1;
    int r = kg_sandbox_cgroup_close(&g, 5000, &e);
    finish(&c, CHILD_TIMEOUT_MS);
    if (r < 0)
        fail_msg("cgroup_close: %s", e.msg);
    assert_true(ok && escaped > 0);
    kg_sandbox_reap_orphans(NULL, 0); /* only reaps the dead one */
    assert_true(dead(escaped));
}

static void test_cgroup_bad_name(void **state)
{
    (void)state;
    kg_sandbox_cgroups none;
    memset(&none, 0, sizeof none);
    kg_sandbox_cgroup g;
    assert_int_equal(kg_sandbox_cgroup_open(&none, "../x", 0, 0, &g, NULL),
                     KG_EINVAL);
    assert_int_equal(kg_sandbox_cgroup_open(&none, "ok", 0, 0, &g, NULL),
                     KG_EUNAVAIL);
}

/* ---- the real payload: torch and triton inside the sandbox ---------- */

static int v_python(void *arg)
{
    char **argv = arg;
    execv(argv[0], argv);
    say("exec %s: %s\n", argv[0], strerror(errno));
    return 127;
}

/*
 * A smoke run of what a harness child does (import torch and triton, an
 * eager op through oneDNN, a Triton kernel in the interpreter), under the
 * profile the CPU worker uses: netns, seccomp with W+X allowed (oneDNN's
 * JIT needs it), rlimits, clean env. Skipped without a Python that has
 * torch (KGYM_PYTHON, else .venv/bin/python). About 5 s.
 */
static void test_torch_smoke(void **state)
{
    (void)state;
    char py[1024], script[1024], cwd[900];
    const char *kp = getenv("KGYM_PYTHON");
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(py, sizeof py, "%s", kp && *kp ? kp : ".venv/bin/python");
    if (py[0] != '/') /* absolute but unresolved: venvs are symlinks */
        snprintf(py, sizeof py, "%s/%s", cwd,
                 kp && *kp ? kp : ".venv/bin/python");
    snprintf(script, sizeof script,
             "%s/tests/unit/sandbox_victims/torch_check.py", cwd);
    if (access(py, X_OK) < 0 || access(script, R_OK) < 0) {
        printf("    skipped: no %s or %s\n", py, script);
        skip();
    }
    char wd[KG_SANDBOX_PATH_MAX];
    assert_int_equal(kg_sandbox_mkdtemp(base, wd, sizeof wd, NULL), 0);
    const char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                         "TRITON_INTERPRET=1", "PYTHONDONTWRITEBYTECODE=1",
                         NULL};
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.filter = &filter_wx;
    cfg.workdir = wd;
    cfg.env = env;
    cfg.cpu_seconds = 60;
    cfg.fsize_bytes = 64u << 20;
    cfg.nofile = 1024;
    cfg.nproc = 256;
    char *argv[] = {py, script, "--quick", NULL};
    struct child c;
    double t0 = now_ms();
    start(&cfg, v_python, argv, &c);
    /* the payload's STEP lines go to our stdout; a failed one: exit 1 */
    finish(&c, 60000);
    double ms = now_ms() - t0;
    assert_int_equal(kg_sandbox_rmtree(wd, NULL), 0);
    printf("    torch smoke run: %.0f ms\n", ms);
    assert_exit0(&c);
}

/*
 * The same smoke run in the candidate's own root, as a candidate uid: the
 * view paths are what kg_sandbox_view_collect finds for this interpreter
 * (with a PATH entry under /root, which no candidate uid may reach, left
 * out), plus the script's directory. The interpreter is exec'd through the
 * venv's path as named (a symlink chain here).
 */
static void test_torch_smoke_new_root(void **state)
{
    (void)state;
    NEED_ROOT("a mount namespace and pivot_root");
    char py[1024], script[1100], cwd[900], victims[1024];
    const char *kp = getenv("KGYM_PYTHON");
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(py, sizeof py, "%s", kp && *kp ? kp : ".venv/bin/python");
    if (py[0] != '/')
        snprintf(py, sizeof py, "%s/%s", cwd,
                 kp && *kp ? kp : ".venv/bin/python");
    snprintf(victims, sizeof victims, "%s/tests/unit/sandbox_victims", cwd);
    snprintf(script, sizeof script, "%s/torch_check.py", victims);
    if (access(py, X_OK) < 0 || access(script, R_OK) < 0) {
        printf("    skipped: no %s or %s\n", py, script);
        skip();
    }
    char hidden[64], *old_path = getenv("PATH");
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", old_path ? old_path : "");
    snprintf(hidden, sizeof hidden, "/root/kgym-test-bin-%d", (int)getpid());
    assert_true(mkdir(hidden, 0755) == 0 || errno == EEXIST);
    char path[4200];
    snprintf(path, sizeof path, "%s:%s", hidden, saved);
    setenv("PATH", path, 1);
    const char *extra[] = {victims, NULL};
    static kg_sandbox_view view;
    kg_err e = {{0}};
    int rc = kg_sandbox_view_collect(py, extra, &view, &e);
    setenv("PATH", saved, 1);
    rmdir(hidden);
    if (rc)
        fail_msg("view: %s", e.msg);
    int has_victims = 0;
    for (int i = 0; i < view.n; i++) {
        printf("    view: %s\n", view.path[i]);
        assert_null(strstr(view.path[i], "/root/kgym-test-bin"));
        has_victims |= !strcmp(view.path[i], victims);
    }
    assert_true(has_victims);
    char wd[KG_SANDBOX_PATH_MAX];
    assert_int_equal(kg_sandbox_mkdtemp(base, wd, sizeof wd, NULL), 0);
    assert_int_equal(chown(wd, 65534, 65534), 0);
    const char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                         "TRITON_INTERPRET=1", "PYTHONDONTWRITEBYTECODE=1",
                         NULL};
    kg_sandbox_cfg cfg;
    default_cfg(&cfg);
    cfg.filter = &filter_wx;
    cfg.workdir = wd;
    cfg.env = env;
    cfg.cpu_seconds = 60;
    cfg.fsize_bytes = 64u << 20;
    cfg.nofile = 1024;
    cfg.uid = cfg.gid = 65534;
    cfg.private_tmp = 1;
    cfg.readonly_root = 1;
    cfg.new_root = 1;
    for (int i = 0; i < view.n; i++)
        cfg.view_paths[i] = view.path[i];
    char *argv[] = {py, script, "--quick", NULL};
    struct child c;
    start(&cfg, v_python, argv, &c);
    finish(&c, 60000);
    assert_int_equal(kg_sandbox_rmtree(wd, NULL), 0);
    assert_exit0(&c);
}

/*
 * A compiler outside the system's part (a gcc in /opt/NAME/bin on PATH, or
 * named by CC) brings its whole installation into the view: gcc runs cc1
 * from libexec and links crt files from lib there, so its bin alone made
 * every build exit 1. A bin without a compiler brings only itself.
 */
static void test_view_compiler_prefix(void **state)
{
    (void)state;
    char top[64], bin[96], gcc[128], plain[64], plainbin[96], cc[128];
    char *old_path = getenv("PATH"), saved[4096], path[4600];
    int me = (int)getpid();
    snprintf(top, sizeof top, "/opt/kgym-test-cc-%d", me);
    snprintf(bin, sizeof bin, "%s/bin", top);
    snprintf(gcc, sizeof gcc, "%s/gcc", bin);
    snprintf(plain, sizeof plain, "/opt/kgym-test-plain-%d", me);
    snprintf(plainbin, sizeof plainbin, "%s/bin", plain);
    snprintf(cc, sizeof cc, "%s/tool", plainbin);
    if (mkdir(top, 0755) < 0 || mkdir(bin, 0755) < 0 || mkdir(plain, 0755) < 0 ||
        mkdir(plainbin, 0755) < 0) {
        printf("    skipped: cannot make dirs in /opt\n");
        skip();
    }
    int fd = open(gcc, O_CREAT | O_WRONLY, 0755);
    assert_true(fd >= 0);
    close(fd);
    fd = open(cc, O_CREAT | O_WRONLY, 0755); /* executable, but no compiler's name */
    assert_true(fd >= 0);
    close(fd);
    snprintf(saved, sizeof saved, "%s", old_path ? old_path : "");
    snprintf(path, sizeof path, "%s:%s:%s", bin, plainbin, saved);
    setenv("PATH", path, 1);
    static kg_sandbox_view view;
    kg_err e = {{0}};
    const char *py = "/usr/bin/python3";
    int rc = kg_sandbox_view_collect(py, NULL, &view, &e);
    int has_top = 0, has_plain = 0, has_plainbin = 0;
    for (int i = 0; !rc && i < view.n; i++) {
        has_top |= !strcmp(view.path[i], top);
        has_plain |= !strcmp(view.path[i], plain);
        has_plainbin |= !strcmp(view.path[i], plainbin);
    }
    /* CC names it by path, with PATH back as it was */
    setenv("PATH", saved, 1);
    setenv("CC", gcc, 1);
    static kg_sandbox_view view2;
    int rc2 = kg_sandbox_view_collect(py, NULL, &view2, &e);
    unsetenv("CC");
    int cc_top = 0;
    for (int i = 0; !rc2 && i < view2.n; i++)
        cc_top |= !strcmp(view2.path[i], top);
    unlink(gcc), unlink(cc), rmdir(bin), rmdir(plainbin), rmdir(top), rmdir(plain);
    assert_int_equal(rc, 0);
    assert_int_equal(rc2, 0);
    assert_true(has_top);       /* /opt/kgym-test-cc-PID, not only its bin */
    assert_false(has_plain);    /* no compiler there: its bin only */
    assert_true(has_plainbin);
    assert_true(cc_top);
}

#define T(f) cmocka_unit_test_teardown(f, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_filter_build),
        T(test_seccomp_denies),
        T(test_seccomp_allows),
        T(test_seccomp_kills),
        T(test_seccomp_wx),
        T(test_network),
        T(test_rlimit_as),
        T(test_rlimit_fsize),
        T(test_rlimit_nofile),
        T(test_rlimit_cpu),
        T(test_no_core),
        T(test_fds),
        T(test_env),
        T(test_workdir_rmtree),
        T(test_kill_group),
        T(test_pdeathsig),
        T(test_pdeathsig_race),
        T(test_uid_switch),
        T(test_private_tmp),
        T(test_readonly_root),
        T(test_host_view),
        T(test_private_tmp_bad_config),
        T(test_json_private_fields),
        T(test_nproc_uid),
        T(test_nproc_root_unbound),
        T(test_cgroup_bad_name),
        T(test_cgroup_memory),
        T(test_cgroup_pids),
        T(test_cgroup_catches_escapee),
        T(test_torch_smoke),
        T(test_torch_smoke_new_root),
        T(test_view_compiler_prefix),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
