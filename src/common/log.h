/*
 * log.h - kgym's one logging helper: a line on stderr per event, with the
 * program's name (and, for long-running commands, the time and who).
 *
 *   kg_log_init("kgym worker", worker_id, 1);  once, in the command
 *   kg_warn("a warm spare died: %s", why);     "2026-...T.. kgym worker ID: a warm spare died: ..."
 *
 * The message is printed as given (no level word is added), so a command's
 * usage errors read "kgym eval: --cand X: ..." as before. Lines below the
 * level (KGYM_LOG_LEVEL=error|warn|info|debug, default info; kg_log_level
 * may raise it, e.g. for --verbose) are dropped. Each line is written with
 * one call, so threads do not interleave within a line.
 */
#ifndef KGYM_LOG_H
#define KGYM_LOG_H

enum kg_log_level { KG_LOG_ERROR, KG_LOG_WARN, KG_LOG_INFO, KG_LOG_DEBUG };

/* program: "kgym serve", "kgym eval"...; who: an id after it, or NULL;
 * timestamps: prefix each line with the local time (servers, workers). The
 * strings are copied. Reads KGYM_LOG_LEVEL. */
void kg_log_init(const char *program, const char *who, int timestamps);

/* Sets the level (KG_LOG_*): lines above it are dropped. */
void kg_log_level(int level);

/* Whether a line of this level would be printed. */
int kg_log_enabled(int level);

void kg_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define kg_error(...) kg_log(KG_LOG_ERROR, __VA_ARGS__)
#define kg_warn(...) kg_log(KG_LOG_WARN, __VA_ARGS__)
#define kg_info(...) kg_log(KG_LOG_INFO, __VA_ARGS__)
#define kg_debug(...) kg_log(KG_LOG_DEBUG, __VA_ARGS__)

#endif
