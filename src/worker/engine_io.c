/* engine_io.c - what the engine reads from its children: their output (kept
 * capped), the judge's result pipe, and how each child ended. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "worker/engine_impl.h"
#include "worker/frame.h"

void eng_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void eng_buf_free(struct buf *b)
{
    kg_dynbuf_free(&b->d);
    b->dropped = 0;
}

/* Appends, keeping at most cap bytes: with keep_tail the newest bytes stay,
 * without it an append that would pass cap fails (-1). */
static int buf_add(struct buf *b, const char *s, size_t n, size_t cap,
                   int keep_tail)
{
    kg_dynbuf *d = &b->d;
    if (d->len + n > cap) {
        if (!keep_tail)
            return -1;
        if (n >= cap) {
            b->dropped += d->len + (n - cap);
            s += n - cap;
            n = cap;
            d->len = 0;
        } else {
            size_t drop = d->len + n - cap;
            memmove(d->p, d->p + drop, d->len - drop);
            d->len -= drop;
            b->dropped += drop;
        }
    }
    if (kg_dynbuf_put(d, s, n))
        return -1;
    assert(d->len <= cap);
    return 0;
}

/* The last max bytes of b (borrowed), "" when empty. */
const char *eng_tail_of(const struct buf *b, size_t max)
{
    if (!b->d.p)
        return "";
    return b->d.len > max ? b->d.p + b->d.len - max : b->d.p;
}

/* Reads whatever is ready on a child's log pipe. With --verbose it is also
 * copied to stderr as it comes: a child's raw bytes (partial lines, its own
 * format), so not through kg_log, which writes whole lines of its own. */
void eng_drain_log(kg_engine *e, struct child *c, const char *who)
{
    char tmp[8192];
    while (c->log_fd >= 0) {
        ssize_t n = read(c->log_fd, tmp, sizeof tmp);
        if (n > 0) {
            buf_add(&c->log, tmp, (size_t)n, LOG_CAP, 1);
            if (e->cfg.verbose)
                fprintf(stderr, "[%s %d] %.*s", who, (int)c->pid, (int)n, tmp);
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            eng_close_fd(&c->log_fd);
        break;
    }
}

/* Reads the judge's result pipe; an oversized result is dropped whole (it
 * is never a result). At its end the judge's time of delivery is noted. */
void eng_drain_result(struct slot *sl)
{
    char tmp[65536];
    while (sl->res_fd >= 0) {
        ssize_t n = read(sl->res_fd, tmp, sizeof tmp);
        if (n > 0) {
            if (buf_add(&sl->res, tmp, (size_t)n, KG_FRAME_MAX + 24, 0) < 0) {
                eng_close_fd(&sl->res_fd);
                eng_buf_free(&sl->res);
            }
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            eng_close_fd(&sl->res_fd);
            if (!sl->t_judge_done)
                sl->t_judge_done = kg_now_ms();
        }
        break;
    }
}

/* The i-th entry of slots[], spares[] and dying[] taken as one array. */
static struct slot *slot_at(kg_engine *e, int i)
{
    int n = e->nslots;
    assert(i >= 0 && i < n + MAX_SPARES + MAX_DYING);
    return i < n                ? &e->slots[i]
           : i < n + MAX_SPARES ? &e->spares[i - n]
                                : &e->dying[i - n - MAX_SPARES];
}

/* Records the exit of pid, if a pair holds it, and kills the rest of its
 * process group. */
void eng_note_exit(kg_engine *e, pid_t pid, int status)
{
    for (int i = 0; i < e->nslots + MAX_SPARES + MAX_DYING; i++) {
        struct slot *sl = slot_at(e, i);
        if (!slot_active(sl) && sl->state != S_SPARE && sl->state != S_DYING)
            continue;
        struct child *c = sl->judge.pid == pid  ? &sl->judge
                          : sl->cand.pid == pid ? &sl->cand
                                                : NULL;
        if (!c || c->exited)
            continue;
        c->exited = 1;
        c->status = status;
        /* the session may hold more processes: the whole group goes */
        kg_sandbox_kill_group(pid, 2000, NULL, NULL);
        /* a candidate that ended by a signal of its own after its result
         * went out leaves the device in doubt, as in eng_finish: no new
         * task before the probe */
        if (sl->state == S_DYING && c == &sl->cand &&
            !strncmp(e->cfg.device, "cuda", 4) && WIFSIGNALED(status) &&
            WTERMSIG(status) != SIGKILL) {
            e->need_probe = 1;
            eng_drop_spares(e);
        }
    }
}

/* Notes every exit that is in: from the zygote's reports, or (fresh mode,
 * the children are ours) by waitpid; then reaps what tasks left behind. */
void eng_collect_exits(kg_engine *e)
{
    if (e->zy) {
        pid_t pid;
        int st;
        kg_err err;
        while (kg_zygote_next_exit(e->zy, &pid, &st, &err) == 1)
            eng_note_exit(e, pid, st);
        return;
    }
    pid_t live[2 * (MAX_SLOTS + MAX_DYING)];
    int nlive = 0;
    for (int i = 0; i < e->nslots + MAX_SPARES + MAX_DYING; i++) {
        struct slot *sl = slot_at(e, i);
        if (!slot_active(sl) && sl->state != S_DYING)
            continue;
        pid_t ps[2] = {sl->judge.pid, sl->cand.pid};
        int ex[2] = {sl->judge.exited, sl->cand.exited};
        for (int k = 0; k < 2; k++) {
            int st;
            if (ps[k] > 0 && !ex[k] && waitpid(ps[k], &st, WNOHANG) == ps[k])
                eng_note_exit(e, ps[k], st);
            else if (ps[k] > 0 && !ex[k]) {
                assert(nlive < (int)(sizeof live / sizeof live[0]));
                live[nlive++] = ps[k];
            }
        }
    }
    /* what a task left behind reparented to us (the subreaper) */
    kg_sandbox_reap_orphans(live, nlive);
}
