/* engine_state.c - a slot's states and the transitions allowed between them
 * (engine_impl.h draws them); the only place a slot's state changes. */
#include <assert.h>
#include <string.h>

#include "worker/engine_impl.h"

/* allowed[from][to]: every other change is a bug in the engine. */
static const unsigned char allowed[S_NSTATES][S_NSTATES] = {
    [S_FREE] = {[S_SPARE] = 1, [S_RUNNING] = 1},
    [S_SPARE] = {[S_STAGED] = 1, [S_RUNNING] = 1, [S_FREE] = 1},
    [S_STAGED] = {[S_RUNNING] = 1,
                  [S_RELEASED] = 1,
                  [S_TIMED_OUT] = 1,
                  [S_HELD] = 1,
                  [S_FREE] = 1},
    [S_RUNNING] =
        {[S_RELEASED] = 1, [S_TIMED_OUT] = 1, [S_HELD] = 1, [S_FREE] = 1},
    [S_RELEASED] =
        {[S_TIMED_OUT] = 1, [S_HELD] = 1, [S_DYING] = 1, [S_FREE] = 1},
    [S_TIMED_OUT] = {[S_HELD] = 1, [S_FREE] = 1},
    [S_HELD] = {[S_FREE] = 1},
    [S_DYING] = {[S_FREE] = 1},
};

int slot_transition_ok(enum slot_state from, enum slot_state to)
{
    return from < S_NSTATES && to < S_NSTATES && allowed[from][to];
}

/* Changes sl's state; entering S_RUNNING takes a device slot, which the
 * slot keeps until it is cleared. */
void slot_set_state(struct slot *sl, enum slot_state to)
{
    assert(slot_transition_ok(sl->state, to));
    assert(to != S_STAGED || !sl->device);
    if (to == S_RUNNING)
        sl->device = 1;
    sl->state = to;
}

/* An empty slot: everything zero, no fds (S_FREE). Not a transition: for
 * slots never used, or whose pair was freed or moved away. */
void slot_clear(struct slot *sl)
{
    memset(sl, 0, sizeof *sl);
    sl->res_fd = sl->task_fd = sl->judge.log_fd = sl->cand.log_fd = -1;
}

/* Moves src's pair, task, fds and buffers into the free slot dst (a spare
 * taken by a task, a released pair into dying[]); src is left free. */
void slot_move(struct slot *dst, struct slot *src)
{
    assert(dst->state == S_FREE && src->state != S_FREE);
    *dst = *src;
    slot_clear(src);
}

/* A task whose pair is alive or being killed: what each step reads, and
 * what holds the device (see settle_probe). */
int slot_active(const struct slot *sl)
{
    return sl->state == S_STAGED || sl->state == S_RUNNING ||
           sl->state == S_RELEASED || sl->state == S_TIMED_OUT;
}
