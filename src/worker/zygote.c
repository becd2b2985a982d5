/* zygote.c - start, talk to and stop the warm Python zygote. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/zygote.h"

#define MSG_MAX (1 << 20) /* a spawn request carries the task's code */
#define MAX_EXITS 256

struct kg_zygote {
    pid_t pid;
    int fd;
    int dead;
    json_t *info;
    struct {
        pid_t pid;
        int status;
    } exits[MAX_EXITS];
    int nexits;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Reads one message (nonblocking when wait_ms == 0). Returns 1 with *msg,
 * 0 when nothing arrived in time, KG_EUNAVAIL on EOF or error. */
static int recv_msg(kg_zygote *z, int wait_ms, json_t **msg, kg_err *err)
{
    struct pollfd p = {.fd = z->fd, .events = POLLIN};
    int r = poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR)
        return 0;
    if (r <= 0)
        return r == 0 ? 0 : kg_errf(err, KG_EUNAVAIL, "poll: %s", strerror(errno));
    static char buf[65536];
    ssize_t n = recv(z->fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        z->dead = 1;
        return kg_errf(err, KG_EUNAVAIL, "zygote closed its control socket");
    }
    json_error_t je;
    *msg = json_loadb(buf, (size_t)n, 0, &je);
    if (!*msg || !json_is_object(*msg)) {
        json_decref(*msg);
        z->dead = 1;
        return kg_errf(err, KG_EUNAVAIL, "zygote sent a bad message: %s", je.text);
    }
    return 1;
}

/* Queues an exit event; returns 1 if msg was one. */
static int take_exit(kg_zygote *z, json_t *msg)
{
    const char *ev = json_string_value(json_object_get(msg, "event"));
    if (!ev || strcmp(ev, "exit"))
        return 0;
    if (z->nexits < MAX_EXITS) {
        z->exits[z->nexits].pid = (pid_t)json_integer_value(json_object_get(msg, "pid"));
        z->exits[z->nexits].status = (int)json_integer_value(json_object_get(msg, "status"));
        z->nexits++;
    }
    return 1;
}

int kg_zygote_start(kg_zygote **out, const kg_zygote_cfg *cfg, kg_err *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return kg_errf(err, KG_EIO, "socketpair: %s", strerror(errno));
    kg_zygote *z = calloc(1, sizeof *z);
    if (!z) {
        close(sv[0]), close(sv[1]);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    z->fd = sv[0];
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]), close(sv[1]), free(z);
        return kg_errf(err, KG_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        /* child: fd 3 is the control socket */
        if (dup2(sv[1], 3) < 0)
            _exit(127);
        if (cfg->log_fd >= 0) {
            dup2(cfg->log_fd, 1);
            dup2(cfg->log_fd, 2);
        }
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        for (int fd = 4; fd < 1024; fd++)
            close(fd);
        setenv("PYTHONPATH", cfg->pythonpath, 1);
        setenv("PYTHONUNBUFFERED", "1", 1);
        setenv("KGYM_SANDBOX_LIB", cfg->sandbox_lib ? cfg->sandbox_lib : "", 1);
        for (const char *const *e = cfg->env; e && *e; e++)
            putenv((char *)*e);
        execlp(cfg->python, cfg->python, "-m", "kgym_harness.zygote", "--ctl-fd", "3",
               (char *)NULL);
        fprintf(stderr, "kgym: cannot run %s: %s\n", cfg->python, strerror(errno));
        _exit(127);
    }
    close(sv[1]);
    z->pid = pid;
    double deadline = now_ms() + (cfg->ready_timeout_ms > 0 ? cfg->ready_timeout_ms : 120000);
    for (;;) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) {
            kg_zygote_stop(z);
            return kg_errf(err, KG_ETIMEOUT, "zygote did not become ready in time");
        }
        json_t *msg = NULL;
        kg_err e2;
        int r = recv_msg(z, left < 200 ? left : 200, &msg, &e2);
        if (r < 0) {
            kg_zygote_stop(z);
            return kg_errf(err, KG_EUNAVAIL,
                           "zygote failed to start (%s); is torch importable by %s?",
                           e2.msg, cfg->python);
        }
        if (r == 0)
            continue;
        const char *ev = json_string_value(json_object_get(msg, "event"));
        if (ev && !strcmp(ev, "ready")) {
            z->info = msg;
            break;
        }
        json_decref(msg);
    }
    *out = z;
    return 0;
}

int kg_zygote_spawn(kg_zygote *z, const json_t *req, const int *fds, int nfds,
                    pid_t *pid, kg_err *err)
{
    if (z->dead)
        return kg_errf(err, KG_EUNAVAIL, "zygote is gone");
    char *s = json_dumps(req, JSON_COMPACT);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "cannot encode spawn request");
    size_t len = strlen(s);
    if (len > MSG_MAX) {
        free(s);
        return kg_errf(err, KG_EINVAL, "spawn request too large (%zu bytes)", len);
    }
    struct iovec iov = {.iov_base = s, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n = sendmsg(z->fd, &mh, MSG_NOSIGNAL);
    free(s);
    if (n < 0) {
        z->dead = 1;
        return kg_errf(err, KG_EUNAVAIL, "cannot reach zygote: %s", strerror(errno));
    }
    json_int_t id = json_integer_value(json_object_get(req, "id"));
    double deadline = now_ms() + 30000;
    while (now_ms() < deadline) {
        json_t *msg = NULL;
        int r = recv_msg(z, 200, &msg, err);
        if (r < 0)
            return r;
        if (r == 0)
            continue;
        if (take_exit(z, msg)) {
            json_decref(msg);
            continue;
        }
        const char *ev = json_string_value(json_object_get(msg, "event"));
        if (json_integer_value(json_object_get(msg, "id")) == id && ev) {
            int rc = 0;
            if (!strcmp(ev, "spawned"))
                *pid = (pid_t)json_integer_value(json_object_get(msg, "pid"));
            else
                rc = kg_errf(err, KG_EIO, "zygote could not spawn: %s",
                             json_string_value(json_object_get(msg, "message")));
            json_decref(msg);
            return rc;
        }
        json_decref(msg);
    }
    return kg_errf(err, KG_ETIMEOUT, "zygote did not answer a spawn request");
}

int kg_zygote_fd(const kg_zygote *z)
{
    return z->fd;
}

int kg_zygote_next_exit(kg_zygote *z, pid_t *pid, int *status, kg_err *err)
{
    while (!z->dead) {
        json_t *msg = NULL;
        int r = recv_msg(z, 0, &msg, err);
        if (r <= 0)
            break;
        take_exit(z, msg);
        json_decref(msg);
    }
    if (z->nexits > 0) {
        *pid = z->exits[0].pid;
        *status = z->exits[0].status;
        memmove(z->exits, z->exits + 1, sizeof z->exits[0] * (size_t)--z->nexits);
        return 1;
    }
    if (z->dead)
        return kg_errf(err, KG_EUNAVAIL, "zygote is gone");
    return 0;
}

pid_t kg_zygote_pid(const kg_zygote *z)
{
    return z->pid;
}

const json_t *kg_zygote_info(const kg_zygote *z)
{
    return z->info;
}

int kg_zygote_alive(kg_zygote *z)
{
    if (z->dead)
        return 0;
    int st;
    if (waitpid(z->pid, &st, WNOHANG) == z->pid) {
        z->dead = 1;
        z->pid = -1;
    }
    return !z->dead;
}

void kg_zygote_stop(kg_zygote *z)
{
    if (!z)
        return;
    if (z->pid > 0) {
        kill(z->pid, SIGKILL);
        waitpid(z->pid, NULL, 0);
    }
    close(z->fd);
    json_decref(z->info);
    free(z);
}
