/* test_http_hardening.c - kgym serve's pure request checks: the trusted
 * client ranges of --trust-clients-from (src/server/auth.c) and the raw
 * path a request is routed on (src/server/http.c). The same behaviour is
 * driven through a real server in
 * tests/integration/test_server_hardening.py. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/http_client.h"
#include "server/auth.h"
#include "server/http.h"

static int parse(const char *s, kg_cidr *c, kg_err *err)
{
    return kg_cidr_parse(s, strlen(s), c, err);
}

static const char *fmt(const kg_cidr *c)
{
    static char buf[64];
    kg_cidr_format(c, buf, sizeof buf);
    return buf;
}

/* An address as a sockaddr (v4 or v6 by its text). */
static const struct sockaddr *addr(const char *text)
{
    static struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, &a6->sin6_addr), 1);
        a6->sin6_family = AF_INET6;
    }
    return (const struct sockaddr *)&ss;
}

static int match(const char *cidr, const char *peer)
{
    kg_cidr c;
    kg_err err;
    assert_int_equal(parse(cidr, &c, &err), 0);
    return kg_cidr_match(&c, addr(peer));
}

static void test_cidr_parse_accepts_prefixes(void **state)
{
    (void)state;
    kg_cidr c;
    kg_err err;
    assert_int_equal(parse("10.0.0.0/8", &c, &err), 0);
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix, 8);
    assert_string_equal(fmt(&c), "10.0.0.0/8");
    assert_int_equal(parse("127.0.0.1/32", &c, &err), 0);
    assert_string_equal(fmt(&c), "127.0.0.1/32");
    assert_int_equal(parse("0.0.0.0/0", &c, &err), 0);
    assert_int_equal(parse("fd00::/8", &c, &err), 0);
    assert_int_equal(c.family, AF_INET6);
    assert_string_equal(fmt(&c), "fd00::/8");
    assert_int_equal(parse("::1/128", &c, &err), 0);
    assert_int_equal(parse("::/0", &c, &err), 0);
    /* an IPv4-mapped IPv6 prefix is the IPv4 one */
    assert_int_equal(parse("::ffff:10.0.0.0/104", &c, &err), 0);
    assert_int_equal(c.family, AF_INET);
    assert_string_equal(fmt(&c), "10.0.0.0/8");
}

static void test_cidr_parse_is_strict(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",           "10.0.0.0",    "10.0.0.0/",   "10.0.0.0/33",
        "10.0.0.0/08", "10.0.0.0/+8", "10.0.0.0/-1", "10.0.0.0/8 ",
        " 10.0.0.0/8", "10.0.0/8",    "010.0.0.0/8", "256.0.0.0/8",
        "10.0.0.0/8/8", "fd00::/129", "fd00::%lo/8", "host/8",
        "10.0.0.1/8",  "fd00::1/8",   "10.0.0.0/1000", "/8",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kg_cidr c;
        kg_err err = {{0}};
        if (parse(bad[i], &c, &err) != KG_EINVAL)
            fail_msg("accepted %s", bad[i]);
        assert_true(err.msg[0]);
    }
    /* bits past the prefix: the message says what was meant */
    kg_cidr c;
    kg_err err;
    assert_int_equal(parse("10.1.2.3/8", &c, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "10.0.0.0/8"));
    /* a NUL inside the given length */
    assert_int_equal(kg_cidr_parse("10.0.0.0/8\0x", 12, &c, &err), KG_EINVAL);
}

static void test_cidr_match(void **state)
{
    (void)state;
    assert_true(match("10.0.0.0/8", "10.200.3.4"));
    assert_false(match("10.0.0.0/8", "11.0.0.1"));
    assert_false(match("10.0.0.0/8", "127.0.0.1"));
    assert_true(match("192.168.4.0/22", "192.168.7.255"));
    assert_false(match("192.168.4.0/22", "192.168.8.0"));
    assert_true(match("127.0.0.1/32", "127.0.0.1"));
    assert_false(match("127.0.0.1/32", "127.0.0.2"));
    assert_true(match("0.0.0.0/0", "8.8.8.8"));
    assert_true(match("fd00::/8", "fd12:3456::1"));
    assert_false(match("fd00::/8", "fe80::1"));
    assert_true(match("2001:db8::/33", "2001:db8:7fff::1"));
    assert_false(match("2001:db8::/33", "2001:db8:8000::1"));
    /* an IPv4 client on a [::] listener matches IPv4 prefixes only */
    assert_true(match("10.0.0.0/8", "::ffff:10.1.2.3"));
    assert_false(match("10.0.0.0/8", "::ffff:11.1.2.3"));
    assert_false(match("::/0", "::ffff:10.1.2.3"));
    assert_false(match("::/0", "10.1.2.3"));
    assert_false(match("0.0.0.0/0", "::1"));
}

static void test_trusted_lists(void **state)
{
    (void)state;
    kg_auth *a = NULL;
    kg_err err;
    assert_int_equal(kg_auth_open(NULL, NULL, &a, &err), 0);
    assert_int_equal(kg_auth_trusted(a, NULL), 0);
    assert_false(kg_auth_peer_trusted(a, addr("127.0.0.1")));
    assert_int_equal(kg_auth_trust(a, "10.0.0.0/8,fd00::/8", &err), 0);
    assert_int_equal(kg_auth_trust(a, "127.0.0.1/32", &err), 0);
    const kg_cidr *list;
    assert_int_equal(kg_auth_trusted(a, &list), 3);
    assert_string_equal(fmt(&list[1]), "fd00::/8");
    assert_true(kg_auth_peer_trusted(a, addr("10.9.9.9")));
    assert_true(kg_auth_peer_trusted(a, addr("fd00::5")));
    assert_true(kg_auth_peer_trusted(a, addr("127.0.0.1")));
    assert_false(kg_auth_peer_trusted(a, addr("127.0.0.2")));
    /* a bad item adds nothing, and names itself */
    assert_int_equal(kg_auth_trust(a, "192.168.0.0/16,,", &err), KG_EINVAL);
    assert_int_equal(kg_auth_trust(a, "192.168.0.0/16,nope/3", &err),
                     KG_EINVAL);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(kg_auth_trusted(a, NULL), 3);
    assert_false(kg_auth_peer_trusted(a, addr("192.168.1.1")));
    kg_auth_free(a);
}

/* kg_http_clean_path on a C string; returns the clean path or NULL. */
static const char *clean(const char *raw)
{
    static char out[256];
    return kg_http_clean_path(raw, strlen(raw), out, sizeof out) ? NULL : out;
}

static void test_clean_path(void **state)
{
    (void)state;
    assert_string_equal(clean("/status/ack-1"), "/status/ack-1");
    assert_string_equal(clean("/status/a.b_c:d~e"), "/status/a.b_c:d~e");
    /* unreserved characters and ':' may come encoded */
    assert_string_equal(clean("/status/ack%2D1"), "/status/ack-1");
    assert_string_equal(clean("/status/id%3a7"), "/status/id:7");
    assert_string_equal(clean("/%65valuate"), "/evaluate");
    /* anything else encoded is refused, not decoded into another path */
    static const char *const bad[] = {
        "/tasks%2fack-2%00.html", "/tasks%2Fack-2", "/evaluate%00.png",
        "/status/ack-1%00junk",   "/status%2fID",   "/status/a%20b",
        "/status/a%3Fb",          "/status/a%25",   "/status/a%",
        "/status/a%4",            "/status/a%zz",   "/status/a%0a",
        "/status/a%ff",           "/status/a b",    "/status/a\tb",
        "/status/a?b",            "/status/a#b",    "/status/\x7f",
        "/status/\xc3\xa9",       "/status/a%2e%2e%2f",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (clean(bad[i]))
            fail_msg("accepted %s", bad[i]);
    /* the raw length counts, not a NUL */
    char out[64];
    assert_int_equal(kg_http_clean_path("/health\0x", 9, out, sizeof out), -1);
    assert_int_equal(kg_http_clean_path("/health", 7, out, sizeof out), 0);
    /* out too small */
    assert_int_equal(kg_http_clean_path("/health", 7, out, 7), -1);
    /* a clean path still routes as before */
    int route, role;
    const char *param;
    assert_int_equal(kg_http_route("GET", clean("/status/ack%2D1"), &route,
                                   &role, &param),
                     0);
    assert_string_equal(param, "ack-1");
}

/* A token file of the given bytes in a fresh temp dir; its path. */
static const char *token_file(const void *bytes, size_t n)
{
    static char dir[64], path[96];
    strcpy(dir, "/tmp/kgym-tok-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tokens", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
    return path;
}

static void rm_token_file(const char *path)
{
    char dir[96];
    snprintf(dir, sizeof dir, "%s", path);
    unlink(path);
    *strrchr(dir, '/') = 0;
    rmdir(dir);
}

/* kg_auth_open on one file as both token sets; its rc, message in err. */
static int open_tokens(const char *path, kg_err *err)
{
    kg_auth *a = NULL;
    /* a read that blocks or spins fails the test instead of hanging it */
    alarm(10);
    int rc = kg_auth_open(path, NULL, &a, err);
    alarm(0);
    kg_auth_free(a);
    return rc;
}

static void test_token_files(void **state)
{
    (void)state;
    kg_err err;
    /* a good file still loads */
    static const char good[] = "# c\n  tok-0123456789abcdef \r\n\n";
    const char *p = token_file(good, sizeof good - 1);
    assert_int_equal(open_tokens(p, &err), 0);
    char *t = NULL;
    assert_int_equal(kg_client_read_token(p, &t, &err), 0);
    assert_string_equal(t, "tok-0123456789abcdef");
    free(t);
    rm_token_file(p);
    /* a NUL inside a line is refused, the file and line named, even when
     * what comes before it would be a valid token */
    static const char nul[] = "tok-0123456789abcdef\0tail\n";
    p = token_file(nul, sizeof nul - 1);
    assert_int_equal(open_tokens(p, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, p));
    assert_non_null(strstr(err.msg, ":1: a NUL or control byte (0x00)"));
    /* the client side reads it the same way */
    char *tok = NULL;
    assert_int_equal(kg_client_read_token(p, &tok, &err), KG_EINVAL);
    assert_null(tok);
    assert_non_null(strstr(err.msg, "NUL or control"));
    rm_token_file(p);
    /* a control byte, on the second line */
    static const char ctl[] = "# ok\ntok-0123456789\x1b[0mabcdef\n";
    p = token_file(ctl, sizeof ctl - 1);
    assert_int_equal(open_tokens(p, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, ":2: a NUL or control byte (0x1b)"));
    rm_token_file(p);
    /* a file past the cap */
    size_t big = 1024 * 1024 + 1;
    char *b = malloc(big);
    assert_non_null(b);
    memset(b, '#', big);
    p = token_file(b, big);
    free(b);
    assert_int_equal(open_tokens(p, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "larger"));
    rm_token_file(p);
    /* not regular files: a device, a directory, a FIFO with no writer; each
     * answered at once, none read */
    assert_int_equal(open_tokens("/dev/zero", &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "/dev/zero: not a regular file"));
    alarm(10);
    assert_int_equal(kg_client_read_token("/dev/zero", &t, &err), KG_EINVAL);
    alarm(0);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(open_tokens("/tmp", &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));
    char fifo[64];
    strcpy(fifo, "/tmp/kgym-fifo-XXXXXX");
    assert_non_null(mkdtemp(fifo));
    strcat(fifo, "/f");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(open_tokens(fifo, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));
    alarm(10);
    assert_int_equal(kg_client_read_token(fifo, &t, &err), KG_EINVAL);
    alarm(0);
    rm_token_file(fifo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cidr_parse_accepts_prefixes),
        cmocka_unit_test(test_cidr_parse_is_strict),
        cmocka_unit_test(test_cidr_match),
        cmocka_unit_test(test_trusted_lists),
        cmocka_unit_test(test_clean_path),
        cmocka_unit_test(test_token_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
