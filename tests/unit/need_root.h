/*
 * need_root.h - NEED_ROOT(why) for cmocka tests that need root: skipped
 * when not root, with the reason; failed instead under KGYM_REQUIRE_ROOT=1
 * (CI, .ci/run: a root-only test may not skip there).
 */
#ifndef KGYM_TEST_NEED_ROOT_H
#define KGYM_TEST_NEED_ROOT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NEED_ROOT(why)                                                        \
    do {                                                                      \
        if (getuid() != 0) {                                                  \
            const char *req_ = getenv("KGYM_REQUIRE_ROOT");                   \
            if (req_ && strcmp(req_, "1") == 0)                               \
                fail_msg("needs root (%s), and KGYM_REQUIRE_ROOT=1 forbids "  \
                         "skipping it (running as uid %d)",                   \
                         why, (int)getuid());                                 \
            printf("    skipped: needs root (%s)\n", why);                    \
            skip();                                                           \
        }                                                                     \
    } while (0)

#endif
