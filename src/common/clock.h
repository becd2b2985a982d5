/* clock.h - kgym's one clock for intervals and deadlines, and its sleep. */
#ifndef KGYM_CLOCK_H
#define KGYM_CLOCK_H

#include <time.h>

/*
 * Milliseconds on CLOCK_MONOTONIC: for timeouts, backoff and durations,
 * never for a time that is stored or shown (that is CLOCK_REALTIME, as
 * kg_store_now_ms has it). Inline, so that every object that needs it
 * (libkgym_sandbox.so included) has it without another object to link.
 */
static inline double kg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sleeps ms milliseconds (an interrupted sleep returns early). */
static inline void kg_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#endif
