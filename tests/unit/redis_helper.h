/*
 * redis_helper.h - a throw-away redis-server for tests: a free loopback
 * port, a private temp dir, AOF on. The server dies with the test process
 * (PR_SET_PDEATHSIG), and kg_test_redis_stop removes its dir; call it from
 * a cmocka group teardown so it also runs after a failed test.
 */
#ifndef KGYM_TEST_REDIS_HELPER_H
#define KGYM_TEST_REDIS_HELPER_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct kg_test_redis {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[256];  /* "" when removed */
    char fsync[16]; /* appendfsync policy */
} kg_test_redis;

static int kg_test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/*
 * 1 once redis on 127.0.0.1:port answers a data command (EXISTS; PING
 * is answered even while the AOF is still being replayed, EXISTS gets
 * LOADING then).
 */
static int kg_test_redis_ready(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    char buf[64];
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             write(fd, "EXISTS kg\r\n", 11) == 11 &&
             read(fd, buf, sizeof buf) >= 3 && buf[0] == ':';
    if (fd >= 0)
        close(fd);
    return ok;
}

static void kg_test_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/*
 * Starts (or restarts, same port and dir) redis-server and waits until it
 * serves data (5 s at most). Returns 0 or -1.
 */
static int kg_test_redis_start(kg_test_redis *r)
{
    if (!r->dir[0]) {
        snprintf(r->dir, sizeof r->dir, "/tmp/kgym-test-redis-XXXXXX");
        if (!mkdtemp(r->dir)) {
            r->dir[0] = 0;
            return -1;
        }
    }
    if (!r->fsync[0])
        snprintf(r->fsync, sizeof r->fsync, "always");
    if (r->port <= 0)
        r->port = kg_test_free_port();
    if (r->port <= 0)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
        }
        execl("/usr/bin/redis-server", "redis-server", "--port", port, "--bind",
              "127.0.0.1", "--dir", r->dir, "--appendonly", "yes",
              "--appendfsync", r->fsync, "--save", "", "--daemonize", "no",
              (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 500; i++) {
        if (kg_test_redis_ready(r->port))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            return -1;
        }
        kg_test_sleep_ms(10);
    }
    return -1;
}

/* Stops the server with sig (SIGKILL: a crash) and reaps it. */
static void kg_test_redis_kill(kg_test_redis *r, int sig)
{
    if (r->pid > 0) {
        kill(r->pid, sig);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

/* Stops the server and removes its dir. */
static void kg_test_redis_stop(kg_test_redis *r)
{
    kg_test_redis_kill(r, SIGKILL);
    if (r->dir[0]) {
        char cmd[320];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "redis_helper: could not remove %s\n", r->dir);
        r->dir[0] = 0;
    }
}

#endif
