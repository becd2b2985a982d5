/* sandbox_dir.c - a task's private work directory: made, and removed
 * without following links the candidate left there (sandbox.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include "worker/sandbox.h"

/* ---- private work directory ------------------------------------------ */

int kg_sandbox_mkdtemp(const char *base, char *out, size_t outlen, kg_err *err)
{
    if (!out || outlen == 0)
        return kg_errf(err, KG_EINVAL, "mkdtemp: no output buffer");
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    int n = snprintf(out, outlen, "%s/kgym-XXXXXX", base);
    if (n < 0 || (size_t)n >= outlen || (size_t)n >= KG_SANDBOX_PATH_MAX)
        return kg_errf(err, KG_EINVAL, "mkdtemp: path too long");
    if (!mkdtemp(out)) /* mode 0700 */
        return kg_errf(err, KG_EIO, "mkdtemp %s: %s", out, strerror(errno));
    return 0;
}

/* Opens name below dirfd as a directory on device dev, never through a
 * symlink; a directory the child made unreadable is chmod'ed first. */
static int open_subdir(int dirfd, const char *name, dev_t dev)
{
    int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(dirfd, name, flags);
    if (fd < 0 && errno == EACCES) {
        fchmodat(dirfd, name, S_IRWXU, AT_SYMLINK_NOFOLLOW);
        fd = openat(dirfd, name, flags);
    }
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_dev != dev) {
        close(fd);
        errno = EXDEV;
        return -1;
    }
    return fd;
}

/*
 * Unlinks every non-directory in dirfd. Returns 1 with the first
 * subdirectory's name in sub, 0 when the directory is empty, -1 on error.
 */
static int strip_dir(int dirfd, char *sub, size_t sublen)
{
    int dfd = dup(dirfd);
    if (dfd < 0)
        return -1;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    rewinddir(d);
    fchmod(dirfd, S_IRWXU); /* a child may have made it read-only */
    int found = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        int isdir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            isdir = S_ISDIR(st.st_mode);
        }
        if (isdir) {
            if (!found && strlen(nm) < sublen) {
                memcpy(sub, nm, strlen(nm) + 1);
                found = 1;
            }
            continue;
        }
        if (unlinkat(dirfd, nm, 0) < 0 && errno != ENOENT)
            rc = -1;
    }
    closedir(d);
    return rc < 0 ? -1 : found;
}

/* In parent, removes the directory whose inode is child's. */
static int rmdir_by_inode(int parent, const struct stat *child)
{
    int dfd = dup(parent);
    if (dfd < 0)
        return -1;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    rewinddir(d);
    int rc = -1;
    errno = ENOENT;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(parent, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            st.st_ino == child->st_ino && st.st_dev == child->st_dev) {
            rc = unlinkat(parent, e->d_name, AT_REMOVEDIR);
            break;
        }
    }
    closedir(d);
    return rc;
}

/*
 * Depth-first without recursion: descend into the first subdirectory,
 * strip it, and when a directory is empty climb back through ".." and
 * remove it. Two fds at most, whatever the depth a child built.
 */
int kg_sandbox_rmtree(const char *path, kg_err *err)
{
    struct stat root;
    if (!path || !*path)
        return kg_errf(err, KG_EINVAL, "rmtree: empty path");
    if (lstat(path, &root) < 0)
        return errno == ENOENT ? 0
                               : kg_errf(err, KG_EIO, "rmtree %s: %s", path,
                                         strerror(errno));
    if (!S_ISDIR(root.st_mode))
        return unlink(path) < 0 ? kg_errf(err, KG_EIO, "rmtree %s: %s", path,
                                          strerror(errno))
                                : 0;
    int cur = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cur < 0)
        return kg_errf(err, KG_EIO, "rmtree %s: %s", path, strerror(errno));
    long depth = 0;
    char sub[NAME_MAX + 1];
    for (;;) {
        int r = strip_dir(cur, sub, sizeof sub);
        if (r < 0)
            break;
        if (r == 1) {
            int next = open_subdir(cur, sub, root.st_dev);
            if (next < 0)
                break;
            close(cur);
            cur = next;
            depth++;
            continue;
        }
        if (depth == 0) {
            close(cur);
            if (rmdir(path) < 0)
                return kg_errf(err, KG_EIO, "rmtree %s: %s", path,
                               strerror(errno));
            return 0;
        }
        struct stat me;
        if (fstat(cur, &me) < 0)
            break;
        int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (up < 0)
            break;
        close(cur);
        cur = up;
        depth--;
        if (rmdir_by_inode(cur, &me) < 0)
            break;
    }
    int e = errno;
    close(cur);
    return kg_errf(err, KG_EIO, "rmtree %s (depth %ld): %s", path, depth,
                   strerror(e));
}
