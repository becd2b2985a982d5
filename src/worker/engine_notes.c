/* engine_notes.c - what a judge tells its worker before its result, as
 * notes ahead of its frame on the result pipe (frame.h): the problem's
 * footprint, estimated at its set-up and measured once the reference's
 * first pass is done (admission by memory),
 * and when its timing phase holds the device alone and when that ends (the
 * pair's CPU priority). The judge is ours; the candidate writes no note. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "worker/engine_impl.h"
#include "worker/frame.h"

/* Sets the nice value of every thread of pid (/proc/pid/task), or of its
 * main thread only (main_only): Linux's setpriority(PRIO_PROCESS) takes a
 * thread id. 0, or -1 when a thread could not be set. */
static int nice_threads(pid_t pid, int nice, int main_only)
{
    if (pid <= 0)
        return 0;
    if (main_only)
        return setpriority(PRIO_PROCESS, (id_t)pid, nice);
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long tid = strtol(de->d_name, NULL, 10);
        if (tid > 0 && setpriority(PRIO_PROCESS, (id_t)tid, nice) && errno != ESRCH)
            rc = -1;
    }
    closedir(d);
    return rc;
}

/* While a pair times alone (the judge's reference blocks, the candidate's
 * kernel blocks, each on its main thread), those two threads run at
 * TIMING_NICE: a host-bound model's launches then wait less for a CPU that
 * the other tasks' set-up, compiles and checks keep busy, and the two
 * sides get the same. Ended, every thread of both goes back to 0 (threads
 * the candidate made meanwhile inherited the boost: not kept). Needs
 * CAP_SYS_NICE (a root worker); without it nothing changes. */
void eng_timing_priority(kg_engine *e, struct slot *sl, int timing)
{
    pid_t pids[2] = {sl->judge.exited ? 0 : sl->judge.pid,
                     sl->cand.exited ? 0 : sl->cand.pid};
    for (int i = 0; i < 2; i++)
        if (nice_threads(pids[i], timing ? TIMING_NICE : 0, timing) &&
            !e->nice_refused) {
            e->nice_refused = 1; /* said once */
            eng_log_verbose(e, "the timing pair's CPU priority: %s",
                            strerror(errno));
        }
}

void eng_take_notes(kg_engine *e, struct slot *sl)
{
    for (;;) {
        json_t *note;
        size_t used;
        kg_err err;
        int rc = kg_note_take(sl->res.d.p ? sl->res.d.p : "", sl->res.d.len,
                              &note, &used, &err);
        if (rc == 0)
            return;
        if (rc < 0) { /* a bad note: the pipe is dropped (no frame: no pass) */
            eng_log_verbose(e, "task %s: %s",
                            json_string_value(json_object_get(sl->task, "task_id")),
                            err.msg);
            eng_close_fd(&sl->res_fd);
            eng_buf_free(&sl->res);
            return;
        }
        memmove(sl->res.d.p, sl->res.d.p + used, sl->res.d.len - used);
        sl->res.d.len -= used;
        /* the footprint: the problem is known from now on, and the running
         * task holds MEM_FACTOR x of it (never less than it held); told at
         * all (a null estimate too), other unknown problems may start */
        if (json_object_get(note, "footprint_bytes")) {
            json_t *r = json_pack("{s:O}", "memory", note);
            eng_note_footprint(e, sl, r);
            json_decref(r);
            sl->sized = 1;
            double fp = eng_task_footprint(e, sl->task);
            double need = fp > 0 ? eng_need_of(e, fp) : 0;
            if (need > sl->need)
                sl->need = need;
        }
        const json_t *t = json_object_get(note, "timing");
        if (json_is_boolean(t))
            eng_timing_priority(e, sl, json_is_true(t));
        json_decref(note);
    }
}
