/* log.c - kgym's one logging helper (log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

static char program[64] = "kgym";
static char who[128];
static int stamp;
static int level = KG_LOG_INFO;

static int parse_level(const char *s, int def)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; s && i < 4; i++)
        if (!strcmp(s, names[i]))
            return i;
    return def;
}

void kg_log_init(const char *prog, const char *id, int timestamps)
{
    snprintf(program, sizeof program, "%s", prog ? prog : "kgym");
    snprintf(who, sizeof who, "%s", id ? id : "");
    stamp = timestamps;
    level = parse_level(getenv("KGYM_LOG_LEVEL"), KG_LOG_INFO);
}

void kg_log_level(int l)
{
    level = l < KG_LOG_ERROR ? KG_LOG_ERROR : l > KG_LOG_DEBUG ? KG_LOG_DEBUG : l;
}

int kg_log_enabled(int l)
{
    return l <= level;
}

void kg_log(int l, const char *fmt, ...)
{
    if (l > level)
        return;
    char line[2048];
    size_t n = 0;
    if (stamp) {
        time_t t = time(NULL);
        struct tm tm;
        n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S ",
                     localtime_r(&t, &tm));
    }
    int k = snprintf(line + n, sizeof line - n, "%s%s%s: ", program,
                     *who ? " " : "", who);
    if (k > 0)
        n += (size_t)k < sizeof line - n ? (size_t)k : sizeof line - n - 1;
    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k > 0)
        n += (size_t)k < sizeof line - n ? (size_t)k : sizeof line - n - 1;
    if (n + 1 < sizeof line) {
        line[n++] = '\n';
        line[n] = 0;
    } else {
        line[sizeof line - 2] = '\n';
    }
    fputs(line, stderr);
}
