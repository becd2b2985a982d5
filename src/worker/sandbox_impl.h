/*
 * sandbox_impl.h - what the sandbox's parent-side files share and nothing
 * else uses: the clock and the sleep of their timed waits.
 */
#ifndef KGYM_SANDBOX_IMPL_H
#define KGYM_SANDBOX_IMPL_H

double kg_sandbox__now_ms(void); /* CLOCK_MONOTONIC, ms */
void kg_sandbox__sleep_ms(long ms);

#endif
