/* engine_uid.c - the candidates' uids when kgym runs as root: one per pair
 * in flight, held machine-wide, free again only once the pair's processes
 * and cgroup are gone; and the cache the candidate uids share. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/engine_impl.h"

/* Gives the candidate work dir wd the lowest candidate uid that no pair of
 * any worker on the machine holds (flock), and chowns wd to it: the owner
 * of the work dir is the record of the pair's uid. */
int eng_uid_take(kg_engine *e, const char *wd, kg_err *err)
{
    for (int i = 0; i < CAND_UIDS; i++) {
        if (e->uid_lock[i] != UID_FREE)
            continue;
        char p[64];
        snprintf(p, sizeof p, "%s/%d", UID_LOCK_DIR, CAND_UID0 + i);
        int fd = open(p, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return kg_errf(err, KG_EIO, "uid lock %s: %s", p, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            close(fd); /* another worker's pair has it */
            continue;
        }
        if (chown(wd, (uid_t)(CAND_UID0 + i), CAND_GID) < 0) {
            int en = errno;
            close(fd);
            return kg_errf(err, KG_EIO, "chown %s: %s", wd, strerror(en));
        }
        e->uid_lock[i] = fd;
        return 0;
    }
    return kg_errf(err, KG_EUNAVAIL,
                   "all %d candidate uids from %d are in use on this machine",
                   CAND_UIDS, CAND_UID0);
}

/* The candidate uid of a work dir (its owner), or -1. */
int eng_uid_of(const char *wd)
{
    struct stat st;
    if (!wd[0] || stat(wd, &st) < 0 || st.st_uid < CAND_UID0 ||
        st.st_uid >= CAND_UID0 + CAND_UIDS)
        return -1;
    return (int)st.st_uid;
}

/* Once the pair is gone: unlocks its uid for every worker. */
void eng_uid_release(kg_engine *e, int uid)
{
    if (uid < CAND_UID0 || uid >= CAND_UID0 + CAND_UIDS)
        return;
    int *l = &e->uid_lock[uid - CAND_UID0];
    if (*l >= 0) {
        close(*l);
        *l = UID_FREE;
    }
}

/* Marks the uids /etc/passwd (or NSS) gives to someone as taken for good;
 * refuses a CAND_GID that names a group; makes the lock directory. */
int eng_uids_init(kg_engine *e, kg_err *err)
{
    int n = 0;
    for (int i = 0; i < CAND_UIDS; i++) {
        e->uid_lock[i] =
            getpwuid((uid_t)(CAND_UID0 + i)) ? UID_TAKEN : UID_FREE;
        n += e->uid_lock[i] == UID_FREE;
    }
    if (getgrgid(CAND_GID))
        return kg_errf(err, KG_EINVAL,
                       "gid %d, reserved for kgym's candidates, is a group "
                       "in /etc/group: candidates would share it",
                       CAND_GID);
    struct stat st;
    if ((mkdir(UID_LOCK_DIR, 0700) < 0 && errno != EEXIST) ||
        lstat(UID_LOCK_DIR, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0)
        return kg_errf(err, KG_EIO,
                       "%s (candidate uid locks): not a directory of root's "
                       "(%s)",
                       UID_LOCK_DIR, strerror(errno));
    if (n < CAND_UIDS)
        kg_warn("only %d of the candidate uids %d..%d are free (the others "
                "are in /etc/passwd)",
                n, CAND_UID0, CAND_UID0 + CAND_UIDS - 1);
    return 0;
}

/* Tries again to remove task cgroups that were still emptying; each one
 * gone frees its uid. timeout_ms: per cgroup (0: just look). */
void eng_retry_stale(kg_engine *e, int timeout_ms)
{
    assert(e->nstale >= 0 && e->nstale <= MAX_STALE);
    for (int i = 0; i < e->nstale;) {
        if (kg_sandbox_cgroup_close(&e->stale[i].cg, timeout_ms, NULL)) {
            i++;
            continue;
        }
        eng_uid_release(e, e->stale[i].uid);
        e->stale[i] = e->stale[--e->nstale];
    }
}

/* nftw callback: one cache entry to the candidates' group, group
 * read/write (directories setgid and searchable); links left alone. */
static int cache_entry_fix(const char *path, const struct stat *st, int type,
                           struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_SL || S_ISLNK(st->st_mode))
        return 0;
    mode_t want = S_ISDIR(st->st_mode) ? (st->st_mode & 07777) | 02070
                                       : (st->st_mode & 07777) | 0060;
    if (st->st_gid != CAND_GID && lchown(path, (uid_t)-1, CAND_GID) < 0)
        return 0; /* best effort: the rest may still be fine */
    if ((st->st_mode & 07777) != want)
        chmod(path, want);
    return 0;
}

/* The candidates' cache: root:CAND_GID, mode 2770 (setgid: what a
 * candidate makes there stays in the group; umask 007 keeps it group
 * writable, so any candidate uid can use and refresh any entry). A cache of
 * another layout (uid nobody, from an older kgym) is removed: it is only
 * a cache. */
static int cache_dir_locked(const char *d, kg_err *err);

/* Workers starting together on one machine share d: the check, the
 * removal of a stale layout and the creation are one step under an flock
 * on d.lock, or one worker could remove the directory another has just
 * made and not yet given to the group. */
int eng_cand_cache_dir(const char *d, kg_err *err)
{
    char lock[PATH_MAX];
    if (snprintf(lock, sizeof lock, "%s.lock", d) >= (int)sizeof lock)
        return kg_errf(err, KG_EINVAL, "cache dir %s: path too long", d);
    int fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return kg_errf(err, KG_EIO, "%s: %s", lock, strerror(errno));
    while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    int rc = cache_dir_locked(d, err);
    close(fd); /* releases the lock */
    return rc;
}

static int cache_dir_locked(const char *d, kg_err *err)
{
    struct stat st;
    if (lstat(d, &st) == 0 &&
        (!S_ISDIR(st.st_mode) || st.st_uid != 0 || st.st_gid != CAND_GID ||
         (st.st_mode & 07777) != 02770)) {
        int rc = kg_sandbox_rmtree(d, err);
        if (rc)
            return rc;
    }
    if (mkdir(d, 0700) < 0 && errno != EEXIST)
        return kg_errf(err, KG_EIO, "mkdir %s: %s", d, strerror(errno));
    if (chown(d, 0, CAND_GID) < 0 || chmod(d, 02770) < 0)
        return kg_errf(err, KG_EIO, "cache dir %s: %s", d, strerror(errno));
    /* entries made by someone else (a root process run without the uid
     * switch, e.g. the harness's own launcher) would make the cache
     * unusable for every candidate uid: give them to the group */
    nftw(d, cache_entry_fix, 16, FTW_PHYS);
    return 0;
}
