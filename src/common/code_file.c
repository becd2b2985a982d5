/* code_file.c - reading a code file given to a command (code_file.h),
 * without trusting it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/code_file.h"
#include "common/request.h"
#include "kgym/dynbuf.h"

/* What a file that is not a regular file is, for a message. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "a special file";
}

/*
 * The offset of the first malformed sequence in s[0..n) (its first byte),
 * or n when all of it is UTF-8 as RFC 3629 (and Python's decoder) has it:
 * no overlong forms, no UTF-16 surrogates, nothing above U+10FFFF. *why
 * says what is wrong.
 */
static size_t utf8_bad(const unsigned char *s, size_t n, const char **why)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
        const char *second = "an overlong encoding";
        if (c < 0xc0) {
            *why = "a continuation byte without a lead byte";
            return i;
        } else if (c < 0xc2) {
            *why = "an overlong encoding";
            return i;
        } else if (c < 0xe0) {
            len = 2;
        } else if (c < 0xf0) {
            len = 3;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed) {
                hi = 0x9f;
                second = "a UTF-16 surrogate (U+D800..U+DFFF)";
            }
        } else if (c < 0xf5) {
            len = 4;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4) {
                hi = 0x8f;
                second = "a code point above U+10FFFF";
            }
        } else {
            *why = c < 0xf8 ? "a code point above U+10FFFF"
                            : "a byte that never occurs in UTF-8";
            return i;
        }
        for (size_t k = 1; k < len; k++) {
            if (i + k >= n) {
                *why = "a sequence cut off by the end of the file";
                return i;
            }
            unsigned d = s[i + k];
            if ((d & 0xc0) != 0x80) {
                *why = "a sequence cut short by a byte that does not "
                       "continue it";
                return i;
            }
            if (k == 1 && (d < lo || d > hi)) {
                *why = second;
                return i;
            }
        }
        i += len;
    }
    return n;
}

/*
 * Reads fd to its end or want bytes, whichever comes first, into a malloc'd
 * NUL-terminated buffer (*n bytes; *rerr an errno when a read failed). size
 * is what fstat said: the first guess, plus one byte, so a file that grows
 * shows it (files such as /proc's say 0). NULL when out of memory.
 */
static char *read_up_to(int fd, size_t size, size_t want, size_t *n, int *rerr)
{
    kg_dynbuf b;
    kg_dynbuf_init(&b, want);
    kg_dynbuf_reserve(&b, size < want ? size + 1 : want);
    char tmp[65536];
    while (!b.failed && b.len < want) {
        size_t k = want - b.len < sizeof tmp ? want - b.len : sizeof tmp;
        ssize_t r = read(fd, tmp, k);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *rerr = errno;
            break;
        }
        if (r == 0)
            break;
        kg_dynbuf_put(&b, tmp, (size_t)r);
    }
    return kg_dynbuf_take(&b, n);
}

char *kg_read_code_file(const char *path, const char *field, size_t *len,
                       kg_err *err)
{
    size_t limit = strcmp(field, "reference_code") ? KG_MAX_KERNEL_CODE
                                                   : KG_MAX_REFERENCE_CODE;
    struct stat st;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO returns at once instead of waiting for a
     * writer; O_NOCTTY: a terminal does not become ours; O_NOFOLLOW: a
     * symbolic link is refused like any other file that is not a regular
     * one, so a link planted for kgym (often run as root) cannot make it
     * read, and echo in a compile error, a file its owner never gave */
    int fd =
        open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            kg_errf(err, KG_EINVAL,
                    "%s: a symbolic link, not a regular file (give the "
                    "file itself)",
                    path);
        else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a socket */
            kg_errf(err, KG_EINVAL, "%s: %s, not a regular file", path,
                    file_kind(st.st_mode));
        else
            kg_errf(err, e == ENOENT ? KG_ENOTFOUND : KG_EIO, "%s: %s", path,
                    strerror(e));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        kg_errf(err, KG_EIO, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        kg_errf(err, KG_EINVAL, "%s: %s, not a regular file", path,
                file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    if ((unsigned long long)st.st_size > limit) {
        kg_errf(err, KG_EINVAL,
                "%s: %lld bytes, over the %s limit of %zu bytes (%zu KiB)",
                path, (long long)st.st_size, field, limit, limit / 1024);
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    size_t n = 0;
    int rerr = 0;
    char *b = read_up_to(fd, (size_t)st.st_size, limit + 1, &n, &rerr);
    close(fd);
    if (!b) {
        kg_errf(err, KG_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    const char *why = NULL, *nul = memchr(b, 0, n);
    size_t at;
    if (rerr)
        kg_errf(err, KG_EIO, "%s: %s", path, strerror(rerr));
    else if (n > limit)
        kg_errf(err, KG_EINVAL,
                "%s: over the %s limit of %zu bytes when read (its size "
                "said %lld: it grew, or is a file such as /proc's)",
                path, field, limit, (long long)st.st_size);
    else if (n == 0)
        kg_errf(err, KG_EINVAL, "%s: empty file", path);
    else if (nul)
        kg_errf(err, KG_EINVAL, "%s: a NUL byte at byte offset %zu", path,
                (size_t)(nul - b));
    else if ((at = utf8_bad((const unsigned char *)b, n, &why)) < n)
        kg_errf(err, KG_EINVAL,
                "%s: not valid UTF-8 at byte offset %zu (0x%02x: %s)", path,
                at, (unsigned char)b[at], why);
    else {
        b[n] = 0;
        *len = n;
        return b;
    }
    free(b);
    return NULL;
}
