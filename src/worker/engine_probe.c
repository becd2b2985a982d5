/* engine_probe.c - the device health probe: after a CUDA failure no task
 * starts until a probe child has initialised the device, run a kernel and
 * synchronised; the results held meanwhile go out after it. */
#include <assert.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "worker/engine_impl.h"

#define PROBE_TRIES 3
#define PROBE_TIMEOUT_MS 60000

/* Waits up to PROBE_TIMEOUT_MS for the probe child c to exit, noting other
 * exits the zygote reports meanwhile; kills it if it does not. 1 when it
 * exited with status 0. */
static int wait_probe(kg_engine *e, struct child *c)
{
    double deadline = kg_now_ms() + PROBE_TIMEOUT_MS;
    int status = -1, got = 0;
    kg_err err;
    while (!got && kg_now_ms() < deadline) {
        eng_drain_log(e, c, "probe");
        if (e->zy) {
            pid_t pid;
            int st;
            while (kg_zygote_next_exit(e->zy, &pid, &st, &err) == 1) {
                if (pid == c->pid)
                    status = st, got = 1;
                else
                    eng_note_exit(e, pid, st);
            }
        } else if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
            got = 1;
        }
        if (!got)
            usleep(20000);
    }
    if (!got)
        kg_sandbox_kill_group(c->pid, 2000, NULL, NULL);
    return got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Runs the probe child (up to PROBE_TRIES times, the zygote restarted in
 * between); 0 = healthy. */
static int probe_device(kg_engine *e)
{
    struct slot tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.task = json_pack("{s:s}", "backend", "cpu");
    struct child c;
    memset(&c, 0, sizeof c);
    kg_err err;
    int healthy = 0;
    for (int attempt = 0; attempt < PROBE_TRIES && !healthy; attempt++) {
        if (attempt > 0 && e->zy && eng_restart_zygote(e, &err))
            continue;
        if (eng_spawn(e, &tmp, "probe", &c, -1, -1, -1, &err))
            continue;
        healthy = wait_probe(e, &c);
        eng_close_fd(&c.log_fd);
        eng_buf_free(&c.log);
        kg_sandbox_rmtree(c.wd, NULL);
    }
    json_decref(tmp.task);
    return healthy ? 0 : -1;
}

/* Once no task runs and no pair is still exiting (a quiet device), probes
 * the device, then hands out the held results: as they are when it is
 * healthy, else as infra_error (not the candidate's fault; retried on a
 * healthy device). */
void eng_settle_probe(kg_engine *e, kg_engine_done_fn done, void *ctx)
{
    for (int i = 0; i < e->nslots; i++)
        if (slot_active(&e->slots[i]))
            return;
    for (int i = 0; i < MAX_DYING; i++)
        if (e->dying[i].state == S_DYING)
            return;
    int healthy = probe_device(e) == 0;
    e->device_bad = !healthy;
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_HELD)
            continue;
        json_t *r = sl->held;
        assert(r);
        sl->held = NULL;
        if (!healthy) {
            json_decref(r);
            r = eng_verdict(
                sl, "infra_error", "DEVICE_UNHEALTHY",
                "the device failed its health probe after this task; "
                "the task will be retried on a healthy device");
            eng_stamp(e, sl, r);
        }
        eng_hand_out(done, ctx, sl, r);
        json_decref(r);
        eng_free_slot(e, sl);
    }
    e->need_probe = 0;
}
