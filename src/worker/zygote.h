/*
 * zygote.h - the warm Python process that forks evaluation children.
 *
 * The zygote (harness/kgym_harness/zygote.py) imports torch, triton and the
 * harness once, never touches CUDA, and forks one child per role request.
 * The worker talks to it over a SOCK_SEQPACKET socket: one JSON object per
 * message, file descriptors passed with SCM_RIGHTS.
 *
 *   worker -> zygote  {"op":"spawn","id":N,"role":...,"sandbox":{...},...}
 *                     + fds (chan, result, log), named in "fds"
 *   zygote -> worker  {"event":"ready",...} once at start
 *                     {"event":"spawned","id":N,"pid":P} | {"event":"error",...}
 *                     {"event":"exit","pid":P,"status":S}  (raw wait status)
 */
#ifndef KGYM_ZYGOTE_H
#define KGYM_ZYGOTE_H

#include <jansson.h>
#include <sys/types.h>

#include "kgym/kgym.h"

typedef struct kg_zygote kg_zygote;

typedef struct kg_zygote_cfg {
    const char *python;      /* interpreter that has torch */
    const char *pythonpath;  /* where kgym_harness lives */
    const char *sandbox_lib; /* path of libkgym_sandbox.so */
    const char *const *env;  /* extra NAME=VALUE for the zygote, NULL-ended */
    int log_fd;              /* zygote's stdout/stderr go here (-1: inherit) */
    int ready_timeout_ms;    /* wait this long for "ready" */
} kg_zygote_cfg;

/* Starts a zygote and waits for it to be ready. *out is owned by the caller
 * (kg_zygote_stop). The ready message is kept (kg_zygote_info). */
int kg_zygote_start(kg_zygote **out, const kg_zygote_cfg *cfg, kg_err *err);

/* Asks for a child; blocks until the zygote answers. Exit events arriving
 * meanwhile are queued for kg_zygote_next_exit. */
int kg_zygote_spawn(kg_zygote *z, const json_t *req, const int *fds, int nfds,
                    pid_t *pid, kg_err *err);

/* The control fd, for poll(). */
int kg_zygote_fd(const kg_zygote *z);

/*
 * Reads what the zygote sent without blocking and returns the next queued
 * exit event: 1 with pid and status set, 0 when none, KG_EUNAVAIL when the
 * zygote is gone.
 */
int kg_zygote_next_exit(kg_zygote *z, pid_t *pid, int *status, kg_err *err);

pid_t kg_zygote_pid(const kg_zygote *z);
const json_t *kg_zygote_info(const kg_zygote *z);
int kg_zygote_alive(kg_zygote *z);

/* Kills the zygote (its children die with it: PDEATHSIG) and frees z. */
void kg_zygote_stop(kg_zygote *z);

#endif
