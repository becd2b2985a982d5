/*
 * auth.h - bearer tokens for kgym serve.
 *
 * Two token sets: clients' (--token-file) and workers'
 * (--worker-token-file, default: the clients' file). A file holds one token
 * per line (blank lines and lines starting with '#' are skipped), so a new
 * token can be added beside the old one and the old one removed later
 * (rotation). kg_auth_reload re-reads both files (SIGHUP).
 *
 * Tokens are compared through their SHA-256 digests, byte by byte without
 * an early exit, against every configured token, so the time taken says
 * nothing about how much of a guess was right nor which token matched.
 */
#ifndef KGYM_SERVER_AUTH_H
#define KGYM_SERVER_AUTH_H

#include <stddef.h>
#include <sys/socket.h>

#include "kgym/kgym.h"

/* Who may call an endpoint. */
enum kg_auth_role {
    KG_AUTH_NONE = 0,   /* open (GET /health) */
    KG_AUTH_CLIENT = 1, /* a client token */
    KG_AUTH_WORKER = 2, /* a worker token */
    KG_AUTH_ANY = 3,    /* either (read-only operator views) */
};

typedef struct kg_auth kg_auth;

/*
 * Loads the token files (either path may be NULL; a NULL worker_path means
 * the client file). Returns 0 and a new kg_auth in *out (caller frees with
 * kg_auth_free), or a negative KG_E* code with the reason in err: a file
 * that cannot be read, or one that holds no token.
 */
int kg_auth_open(const char *client_path, const char *worker_path,
                 kg_auth **out, kg_err *err);
void kg_auth_free(kg_auth *a);

/* Re-reads the files; on error the old tokens stay in force. Thread-safe. */
int kg_auth_reload(kg_auth *a, kg_err *err);

/*
 * Adds one worker token held in memory only (the token kgym serve hands its
 * local workers). It stays valid across kg_auth_reload. Once added, worker
 * endpoints need a worker token even when no token file is configured
 * (clients stay open then). Thread-safe.
 */
int kg_auth_add_worker_token(kg_auth *a, const char *token, kg_err *err);

/* 1 when a token file is configured (auth is on for clients). */
int kg_auth_enabled(const kg_auth *a);

/*
 * Checks an Authorization header value ("Bearer <token>", may be NULL)
 * against the role an endpoint needs. Returns 1 when allowed, 0 when not.
 * Always allowed for KG_AUTH_NONE, and when no token is configured for the
 * role (see kg_auth_add_worker_token). Thread-safe.
 */
int kg_auth_check(kg_auth *a, const char *authorization, int role);

/* Number of tokens loaded for clients and workers (for the start line). */
void kg_auth_counts(kg_auth *a, int *clients, int *workers);

/*
 * Trusted client ranges (kgym serve --trust-clients-from CIDR[,CIDR...]):
 * a request from a peer inside one of them needs no token on a client
 * endpoint (clients' and operators' views: KG_AUTH_CLIENT, KG_AUTH_ANY);
 * one that sends a token must still send a valid one. Worker endpoints
 * never take this. Off unless configured.
 */
#define KG_AUTH_MAX_TRUSTED 64

typedef struct kg_cidr {
    int family;             /* AF_INET or AF_INET6 */
    unsigned char addr[16]; /* the network (host bits zero); 4 used for v4 */
    int prefix;             /* 0..32 (v4) or 0..128 (v6) */
} kg_cidr;

/*
 * Parses one prefix "A.B.C.D/N" or "IPV6/N" (the first n bytes of s),
 * strictly: inet_pton's address forms, N in decimal without a sign or
 * leading zeros, no bit set past the prefix. An IPv4-mapped IPv6 prefix
 * (::ffff:A.B.C.D/N, N >= 96) becomes the IPv4 one. Returns 0, or
 * KG_EINVAL with the reason in err. Pure.
 */
int kg_cidr_parse(const char *s, size_t n, kg_cidr *out, kg_err *err);

/* "10.0.0.0/8", "fd00::/8" (size >= 64 is always enough). */
void kg_cidr_format(const kg_cidr *c, char *buf, size_t size);

/* 1 when the address (AF_INET or AF_INET6; an IPv4-mapped IPv6 address
 * is matched as its IPv4 address) is inside c. Pure. */
int kg_cidr_match(const kg_cidr *c, const struct sockaddr *sa);

/*
 * Adds the comma-separated prefixes of list (no spaces, no empty item) to
 * the trusted ranges. Returns 0, or KG_EINVAL naming the bad item (and
 * nothing is added). Call before serving; not thread-safe against checks.
 */
int kg_auth_trust(kg_auth *a, const char *list, kg_err *err);

/* The trusted ranges (count, and the array in *out when out != NULL). */
int kg_auth_trusted(const kg_auth *a, const kg_cidr **out);

/* 1 when sa is inside a trusted range. Thread-safe (read-only). */
int kg_auth_peer_trusted(const kg_auth *a, const struct sockaddr *sa);

#endif
