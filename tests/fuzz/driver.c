/*
 * driver.c - a main() for the libFuzzer harnesses of tests/fuzz when
 * clang's libFuzzer is not at hand (make fuzz builds it with gcc, under
 * ASan + UBSan). It takes libFuzzer's command line: it runs every file of
 * the directories (and files) named, then mutations of them (bit flips,
 * byte changes, inserts, deletes, copies, splices, dictionary tokens) from
 * a seeded PRNG until -runs or -max_total_time is reached. It has no
 * coverage feedback: a smoke test for crashes near the seeds, not a
 * substitute for libFuzzer.
 *
 *   fuzz_request [-runs=N] [-max_total_time=S] [-seed=N] [-max_len=N]
 *                [-artifact_prefix=P] [-other_libfuzzer_flags=...] DIR|FILE...
 *
 * Exit status: 0 when every input ran; a crash (a sanitizer report, an
 * abort or a signal) ends the process as it would under libFuzzer, after
 * writing the input to <artifact_prefix>crash-input.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    uint8_t *data;
    size_t size;
} input;

static input *pool;
static size_t npool, cap_pool;

/* the input being run, for the crash artifact */
static const uint8_t *cur;
static size_t cur_size;
static char artifact[4096] = "crash-input";

static void dump_input(void)
{
    int fd = open(artifact, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (cur && off < cur_size) {
            ssize_t n = write(fd, cur + off, cur_size - off);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
        close(fd);
    }
    static const char msg[] = "fuzz driver: the crashing input was written to ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, artifact, strlen(artifact)) < 0 ||
        write(2, "\n", 1) < 0)
        return;
}

/* ASan calls this before it exits; UBSan aborts (below), which the
 * signal handler sees */
void __sanitizer_set_death_callback(void (*callback)(void));
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:abort_on_error=1"; }

static void on_signal(int sig)
{
    dump_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void add(const uint8_t *d, size_t n)
{
    if (npool == cap_pool) {
        cap_pool = cap_pool ? 2 * cap_pool : 64;
        pool = realloc(pool, cap_pool * sizeof *pool);
        if (!pool)
            abort();
    }
    uint8_t *c = malloc(n ? n : 1);
    if (!c)
        abort();
    if (n)
        memcpy(c, d, n);
    pool[npool].data = c;
    pool[npool].size = n;
    npool++;
}

static void add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz driver: %s: cannot open\n", path);
        exit(2);
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    add(buf, n);
    free(buf);
}

static void add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        fprintf(stderr, "fuzz driver: %s: no such file or directory\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "fuzz driver: %s: cannot read\n", path);
        exit(2);
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            add_file(p);
    }
    closedir(d);
}

static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* JSON, HTTP and request-field tokens worth splicing in */
static const char *const dict[] = {
    "\"", "\\", "\\u0000", "\\ud800", "\\uDFFF", "{", "}", "[", "]", ":", ",",
    "null", "true", "false", "-0", "1e999", "-1", "0.0", "18446744073709551616",
    "9007199254740993", "NaN", "\"\"", "\n", "\r\n", "\xc3\x28", "\xff", "/",
    "%00", "%2f", "..", "Bearer ", "Bearer client-token-0123456789",
    "\"reference_code\"", "\"kernel_code\"", "\"backend\"", "\"cpu\"",
    "\"cuda\"", "\"triton\"", "\"tasks\"", "\"task_id\"", "\"timeout\"",
    "\"num_correct_trials\"", "\"num_perf_trials\"", "\"seed\"", "\"atol\"",
    "\"rtol\"", "\"priority\"", "\"entry_point\"", "\"strict\"",
    "\"device\"", "\"enable_profiling\"", "\"force_refresh\"",
    "/evaluate", "/evaluate/batch", "/status/", "/results/", "/tasks/",
    "/worker/lease", "/health",
};

/* one mutation of buf (size *n, capacity cap) in place */
static void mutate(uint8_t *buf, size_t *n, size_t cap)
{
    size_t len = *n;
    switch (rnd() % 8) {
    case 0: /* flip a bit */
        if (len)
            buf[below(len)] ^= (uint8_t)(1u << (rnd() % 8));
        break;
    case 1: /* set a byte */
        if (len)
            buf[below(len)] = (uint8_t)rnd();
        break;
    case 2: /* insert random bytes */
    {
        size_t k = 1 + below(8), at = below(len + 1);
        if (len + k > cap)
            break;
        memmove(buf + at + k, buf + at, len - at);
        for (size_t i = 0; i < k; i++)
            buf[at + i] = (uint8_t)rnd();
        *n = len + k;
        break;
    }
    case 3: /* delete a range */
    {
        if (!len)
            break;
        size_t at = below(len), k = 1 + below(len - at < 64 ? len - at : 64);
        memmove(buf + at, buf + at + k, len - at - k);
        *n = len - k;
        break;
    }
    case 4: /* copy a range elsewhere (overwrite) */
    {
        if (len < 2)
            break;
        size_t from = below(len), to = below(len);
        size_t k = 1 + below(len - (from > to ? from : to));
        memmove(buf + to, buf + from, k);
        break;
    }
    case 5: /* splice: the tail of another input */
    {
        const input *o = &pool[below(npool)];
        size_t at = below(len + 1), from = below(o->size + 1);
        size_t k = o->size - from;
        if (at + k > cap)
            k = cap - at;
        memcpy(buf + at, o->data + from, k);
        *n = at + k;
        break;
    }
    case 6: /* insert a dictionary token */
    {
        const char *t = dict[below(sizeof dict / sizeof *dict)];
        size_t k = strlen(t), at = below(len + 1);
        if (len + k > cap)
            break;
        memmove(buf + at + k, buf + at, len - at);
        memcpy(buf + at, t, k);
        *n = len + k;
        break;
    }
    default: /* an interesting number as ASCII digits, overwriting */
    {
        static const char *const nums[] = {"0", "1", "-1", "255", "256", "65535",
                                           "2147483647", "2147483648", "-2147483649",
                                           "4294967296", "1e308", "1e-320"};
        const char *t = nums[below(sizeof nums / sizeof *nums)];
        size_t k = strlen(t), at = below(len + 1);
        if (at + k > cap)
            break;
        memcpy(buf + at, t, k);
        if (at + k > len)
            *n = at + k;
        break;
    }
    }
}

static long flag(const char *arg, const char *name, long dflt)
{
    size_t n = strlen(name);
    if (strncmp(arg, name, n) == 0 && arg[n] == '=')
        return strtol(arg + n + 1, NULL, 10);
    return dflt;
}

int main(int argc, char **argv)
{
    long runs = -1, max_time = 0, max_len = 4096;
    uint64_t seed = (uint64_t)time(NULL);
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            nfiles++;
            continue;
        }
        runs = flag(a, "-runs", runs);
        max_time = flag(a, "-max_total_time", max_time);
        max_len = flag(a, "-max_len", max_len);
        seed = (uint64_t)flag(a, "-seed", (long)seed);
        if (strncmp(a, "-artifact_prefix=", 17) == 0)
            snprintf(artifact, sizeof artifact, "%scrash-input", a + 17);
        /* other libFuzzer flags (-rss_limit_mb, -timeout, ...) are ignored */
    }
    if (!nfiles || max_len < 1) {
        fprintf(stderr, "usage: %s [-runs=N] [-max_total_time=S] [-seed=N] "
                        "[-max_len=N] [-artifact_prefix=P] DIR|FILE...\n", argv[0]);
        return 2;
    }
    __sanitizer_set_death_callback(dump_input);
    signal(SIGABRT, on_signal);
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGFPE, on_signal);
    signal(SIGILL, on_signal);
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-')
            add_path(argv[i]);
    if (!npool)
        add((const uint8_t *)"", 0);
    rng_state = seed;

    /* the seeds themselves, each in a buffer of its own size (ASan sees
     * any read past the end) */
    for (size_t i = 0; i < npool; i++) {
        cur = pool[i].data;
        cur_size = pool[i].size;
        LLVMFuzzerTestOneInput(cur, cur_size);
    }
    fprintf(stderr, "fuzz driver: %zu seed input(s) ran; mutating (seed %llu)\n", npool,
            (unsigned long long)seed);

    size_t cap = (size_t)max_len;
    uint8_t *work = malloc(cap);
    if (!work)
        abort();
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long done = 0;
    for (;;) {
        if (runs >= 0 && done >= runs)
            break;
        if (max_time > 0 && (done & 63) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec >= max_time)
                break;
        }
        if (runs < 0 && max_time <= 0 && done >= 100000)
            break; /* neither bound given: a default one */
        const input *base = &pool[below(npool)];
        size_t n = base->size < cap ? base->size : cap;
        memcpy(work, base->data, n);
        for (int k = 1 + (int)below(8); k > 0; k--)
            mutate(work, &n, cap);
        /* an exact-size copy, so a read past its end is an ASan report */
        uint8_t *in = malloc(n ? n : 1);
        if (!in)
            abort();
        memcpy(in, work, n);
        cur = in;
        cur_size = n;
        LLVMFuzzerTestOneInput(in, n);
        cur = NULL;
        free(in);
        if (below(64) == 0 && npool < 4096)
            add(work, n); /* now and then a mutant joins the pool */
        done++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(stderr, "fuzz driver: %ld mutated input(s) in %.1f s, no crash\n", done,
            (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9);
    free(work);
    for (size_t i = 0; i < npool; i++)
        free(pool[i].data);
    free(pool);
    return 0;
}
