/*
 * sandbox_impl.h - what the sandbox's parent-side files share and nothing
 * else uses: the sleep of their timed waits (the clock is common/clock.h).
 */
#ifndef KGYM_SANDBOX_IMPL_H
#define KGYM_SANDBOX_IMPL_H

void kg_sandbox__sleep_ms(long ms);

#endif
