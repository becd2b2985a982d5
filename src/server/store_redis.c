/*
 * store_redis.c - the task store on Redis (>= 6.2), for workers on several
 * machines.
 *
 * Layout (keys under "kg:"; one logical DB per kgym installation):
 *   kg:q:0 kg:q:1 kg:q:2  one stream per priority (high, normal, low);
 *                         entry {id}; consumer group "kg"; consumers are
 *                         worker ids, plus "kg-sweep" (the sweep's claims)
 *                         and "kg-parked" (retried tasks whose avoided
 *                         worker read them first)
 *   kg:t:<id>             hash: the task (prio status ck req res att w avoid
 *                         avoid_until sub start fin dl entry verdict)
 *   kg:stats              hash: counters s<status> p<prio> v<verdict>
 *                         lease_expiries, kept by the scripts below
 *   kg:w:<id>             hash: a worker (device host reg seen)
 *   kg:workers            zset: worker id -> last heartbeat (ms)
 *   kg:dev                hash: "host\tdevice" -> worker id
 *   kg:c:<key>            string: cached result
 *   kg:sweepcur:<prio>    string: where the sweep's XAUTOCLAIM goes on
 *
 * Reliable-queue primitives do the queueing: a lease is XREADGROUP (new
 * work enters the worker's pending entries list), a heartbeat is XCLAIM of
 * the worker's own entries (resets their idle time), expiry is XAUTOCLAIM
 * with min-idle-time = lease_ms by the sweep, completion is XACK (+ XDEL).
 * Every operation is one Lua script, so it is atomic and one round trip;
 * the task hash says whether a stream entry is still current (`entry`),
 * which makes stale entries (cancelled, requeued) harmless.
 *
 * Time is Redis's (TIME), so all servers sharing the Redis agree.
 * Durability is the server's AOF: with appendfsync always a reply means
 * the write is on disk. Standalone Redis only (scripts touch keys they do
 * not declare, which Redis Cluster forbids).
 *
 * Connections: a pool of hiredis contexts (hiredis is not thread-safe),
 * each used by one call at a time; connect and command timeouts of 1 s; a
 * broken connection is dropped and made again on a later call, so the
 * store recovers by itself when Redis comes back.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis.h>

#include "server/store_impl.h"

#define TIMEOUT_MS 1000
#define RETRY_CONNECT_MS 100 /* after a failed connect, fail fast this long */

/* Shared by every script. */
#define LUA_PRELUDE                                                            \
    "local function now() local t = redis.call('TIME') "                       \
    "return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end\n"   \
    "local function tk(id) return 'kg:t:' .. id end\n"                         \
    "local function count(st, p, v, n)\n"                                      \
    " redis.call('HINCRBY', 'kg:stats', 's' .. st, n)\n"                       \
    " if tonumber(st) == 0 then redis.call('HINCRBY', 'kg:stats', 'p' .. p, "  \
    "n) end\n"                                                                 \
    " if (tonumber(st) == 2 or tonumber(st) == 3) and v and v ~= '' then\n"    \
    "  redis.call('HINCRBY', 'kg:stats', 'v' .. v, n) end\n"                   \
    "end\n"                                                                    \
    "local function drop(q, e) redis.call('XACK', q, 'kg', e) "                \
    "redis.call('XDEL', q, e) end\n"                                           \
    "local function enqueue(id, p) local q = 'kg:q:' .. p\n"                   \
    " local e = redis.call('XADD', q, '*', 'id', id)\n"                        \
    " redis.call('HSET', tk(id), 'entry', e) return e end\n" /* a running task \
                                                                back to        \
                                                                pending (new   \
                                                                entry) or,     \
                                                                past the       \
                                                                limit, to      \
                                                                failed with    \
                                                                the reason;    \
                                                                returns 'r' or \
                                                                'f' */         \
    "local function expire(id, q, e, h, max, t)\n"                             \
    " local k = tk(id) drop(q, e)\n"                                           \
    " local att = tonumber(h.att)\n"                                           \
    " redis.call('HINCRBY', 'kg:stats', 'lease_expiries', 1)\n"                \
    " count(1, h.p, '', -1)\n"                                                 \
    " if max > 0 and att >= max then\n"                                        \
    "  local w = h.w if w == '' then w = '?' end\n"                            \
    "  local s = 's' if att == 1 then s = '' end\n"                            \
    "  local res = cjson.encode({task_id = id, status = 'failed', verdict = "  \
    "'infra_error', error_code = 'LEASE_EXPIRED_TOO_OFTEN', error_message = "  \
    "'the task\\'s lease expired or its worker died ' .. att .. ' time' .. s " \
    ".. ' (last holder ' .. w .. '); not retried again'})\n"                   \
    "  redis.call('HSET', k, 'status', 3, 'res', res, 'verdict', 6, 'fin', "   \
    "t, 'dl', 0, 'entry', '')\n"                                               \
    "  count(3, h.p, '6', 1) return 'f'\n"                                     \
    " end\n"                                                                   \
    " redis.call('HSET', k, 'status', 0, 'dl', 0) enqueue(id, h.p)\n"          \
    " count(0, h.p, '', 1) return 'r'\n"                                       \
    "end\n"                                                                    \
    "local function task(id)\n"                                                \
    " local r = redis.call('HMGET', tk(id), 'status', 'entry', 'att', 'w', "   \
    "'prio', 'avoid', 'avoid_until')\n"                                        \
    " if not r[1] then return nil end\n"                                       \
    " return {st = tonumber(r[1]), entry = r[2], att = r[3], w = r[4], "       \
    "p = r[5], avoid = r[6], avoid_until = tonumber(r[7])}\n"                  \
    "end\n"

enum {
    SC_SUBMIT,
    SC_LEASE,
    SC_COMPLETE,
    SC_RETRY,
    SC_CANCEL,
    SC_SWEEP,
    SC_REGISTER,
    SC_HEARTBEAT,
    SC_UNREGISTER,
    SC_WLIST,
    SC_COUNTS,
    SC_N
};

static const char *const SCRIPTS[SC_N] = {
    /* ARGV: n, then n x (id, prio, cache key, request, replace, use the
       cache). Three commands per new task (HMGET, XADD, HSET with its
       entry); the pending counters once per batch. A task that may be
       answered from the cache (kg_store_submit_batch_cached) and whose
       id is free gets the cached result's text instead of 0 or 1 (one
       that does not parse is ignored: the task is submitted). */
    [SC_SUBMIT] = LUA_PRELUDE
    "local t = now() local out = {} local added = {} local n = 0\n"
    "for i = 0, tonumber(ARGV[1]) - 1 do\n"
    " local id, p, ck, req, rep, uc = ARGV[2 + 6 * i], ARGV[3 + 6 * i], "
    "ARGV[4 + 6 * i], ARGV[5 + 6 * i], ARGV[6 + 6 * i], ARGV[7 + 6 * i]\n"
    " local k = tk(id)\n"
    " local h = redis.call('HMGET', k, 'status', 'prio', 'verdict')\n"
    " local c = false\n"
    " if uc == '1' and not h[1] then\n"
    "  c = redis.call('GET', 'kg:c:' .. ck)\n"
    "  if c and not pcall(cjson.decode, c) then c = false end\n"
    " end\n"
    " if c then out[#out + 1] = c\n"
    " elseif h[1] and (rep ~= '1' or tonumber(h[1]) < 2) then out[#out + 1] "
    "= 1\n"
    " else\n"
    "  if h[1] then count(h[1], h[2], h[3], -1) redis.call('DEL', k) end\n"
    "  local e = redis.call('XADD', 'kg:q:' .. p, '*', 'id', id)\n"
    "  redis.call('HSET', k, 'prio', p, 'status', 0, 'ck', ck, 'req', "
    "req, 'att', 0, 'w', '', 'avoid', '', 'avoid_until', 0, 'sub', t, "
    "'start', 0, 'fin', 0, 'dl', 0, 'verdict', '', 'entry', e)\n"
    "  added[p] = (added[p] or 0) + 1 n = n + 1 out[#out + 1] = 0\n"
    " end\n"
    "end\n"
    "for p, c in pairs(added) do "
    "redis.call('HINCRBY', 'kg:stats', 'p' .. p, c) end\n"
    "if n > 0 then redis.call('HINCRBY', 'kg:stats', 's0', n) end\n"
    "return out\n",
    /*
     * ARGV: worker, lease_ms. Per priority: first a parked (retried) task
     * this worker may take, then new entries (XREADGROUP >). An entry whose
     * task avoids this worker is parked; a stale entry is dropped.
     * Returns the task's fields or false.
     */
    [SC_LEASE] = LUA_PRELUDE
    "local w, lease = ARGV[1], tonumber(ARGV[2]) local t = now()\n"
    "if redis.call('EXISTS', 'kg:w:' .. w) == 0 then\n"
    " return redis.error_reply('NOTFOUND worker ' .. w .. ' is not "
    "registered') end\n"
    "redis.call('HSET', 'kg:w:' .. w, 'seen', t) "
    "redis.call('ZADD', 'kg:workers', t, w)\n"
    "local function take(q, e, id, h)\n"
    " local k = tk(id)\n"
    " redis.call('HSET', k, 'status', 1, 'w', w, 'start', t, 'dl', t + "
    "lease) local att = redis.call('HINCRBY', k, 'att', 1)\n"
    " count(0, h.p, '', -1) count(1, h.p, '', 1)\n"
    " local r = redis.call('HMGET', k, 'prio', 'ck', 'avoid', 'sub', "
    "'req')\n"
    " return {id, r[1], r[2], tostring(att), r[3], r[4], tostring(t), "
    "tostring(t + lease), r[5]}\n"
    "end\n"
    "for p = 0, 2 do\n"
    " local q = 'kg:q:' .. p\n"
    " local parked = redis.call('XPENDING', q, 'kg', '-', '+', 64, "
    "'kg-parked')\n"
    " for _, pe in ipairs(parked) do\n"
    "  local c = redis.call('XCLAIM', q, 'kg', w, 0, pe[1])\n"
    "  local e = c[1]\n"
    "  if type(e) == 'table' and e[2] then\n"
    "   local id = e[2][2] local h = task(id)\n"
    "   if not h or h.st ~= 0 or h.entry ~= e[1] then drop(q, e[1])\n"
    "   elseif h.avoid == w and h.avoid_until > t then\n"
    "    redis.call('XCLAIM', q, 'kg', 'kg-parked', 0, e[1], 'JUSTID')\n"
    "   else return take(q, e[1], id, h) end\n"
    "  else redis.call('XACK', q, 'kg', pe[1]) end\n"
    " end\n"
    " while true do\n"
    "  local r = redis.call('XREADGROUP', 'GROUP', 'kg', w, 'COUNT', 1, "
    "'STREAMS', q, '>')\n"
    "  if not r then break end\n"
    "  local e = r[1][2][1]\n"
    "  local id = e[2][2] local h = task(id)\n"
    "  if not h or h.st ~= 0 or h.entry ~= e[1] then drop(q, e[1])\n"
    "  elseif h.avoid == w and h.avoid_until > t then\n"
    "   redis.call('XCLAIM', q, 'kg', 'kg-parked', 0, e[1], 'JUSTID')\n"
    "  else return take(q, e[1], id, h) end\n"
    " end\n"
    "end\n"
    "return false\n",
    /* ARGV: id, worker, status, result, verdict */
    [SC_COMPLETE] = LUA_PRELUDE
    "local id, w = ARGV[1], ARGV[2] local h = task(id)\n"
    "if not h then return redis.error_reply('NOTFOUND no task ' .. id) "
    "end\n"
    "if h.st ~= 1 or h.w ~= w then return redis.error_reply('ESTATE ' .. "
    "h.st) end\n"
    "drop('kg:q:' .. h.p, h.entry)\n"
    "redis.call('HSET', tk(id), 'status', ARGV[3], 'res', ARGV[4], "
    "'verdict', ARGV[5], 'fin', now(), 'dl', 0, 'entry', '')\n"
    "count(1, h.p, '', -1) count(ARGV[3], h.p, ARGV[5], 1)\n"
    "return 0\n",
    /* ARGV: id, worker, result ('' = keep), avoid_ms */
    [SC_RETRY] = LUA_PRELUDE
    "local id, w = ARGV[1], ARGV[2] local h = task(id) local t = now()\n"
    "if not h then return redis.error_reply('NOTFOUND no task ' .. id) "
    "end\n"
    "if h.st ~= 1 or h.w ~= w then return redis.error_reply('ESTATE ' .. "
    "h.st) end\n"
    "drop('kg:q:' .. h.p, h.entry)\n"
    "redis.call('HSET', tk(id), 'status', 0, 'avoid', w, 'avoid_until', "
    "t + tonumber(ARGV[4]), 'dl', 0)\n"
    "if ARGV[3] ~= '' then redis.call('HSET', tk(id), 'res', ARGV[3]) "
    "end\n"
    "enqueue(id, h.p) count(1, h.p, '', -1) count(0, h.p, '', 1)\n"
    "return 0\n",
    /* ARGV: id. 0 cancelled now, 1 already finished */
    [SC_CANCEL] = LUA_PRELUDE
    "local id = ARGV[1] local h = task(id)\n"
    "if not h then return redis.error_reply('NOTFOUND no task ' .. id) "
    "end\n"
    "if h.st >= 2 then return 1 end\n"
    "if h.entry and h.entry ~= '' then drop('kg:q:' .. h.p, h.entry) end\n"
    "redis.call('HSET', tk(id), 'status', 4, 'fin', now(), 'dl', 0, "
    "'entry', '')\n"
    "count(h.st, h.p, '', -1) count(4, h.p, '', 1)\n"
    "return 0\n",
    /*
     * ARGV: lease_ms, worker_ttl_ms, max_attempts. Entries of dead or gone
     * workers first (XINFO CONSUMERS + XPENDING), then every entry idle
     * longer than a lease (XAUTOCLAIM). Returns {requeued, failed, dead}.
     */
    [SC_SWEEP] = LUA_PRELUDE
    "local lease, ttl, max = tonumber(ARGV[1]), tonumber(ARGV[2]), "
    "tonumber(ARGV[3]) local t = now()\n"
    "local nr, nf, dead = 0, 0, 0\n"
    "local function handle(q, eid, fields)\n"
    " if type(fields) ~= 'table' or not fields[2] then "
    "redis.call('XACK', q, 'kg', eid) return end\n"
    " local id = fields[2] local h = task(id)\n"
    " if not h or h.entry ~= eid or h.st > 1 then drop(q, eid)\n"
    " elseif h.st == 0 then redis.call('XCLAIM', q, 'kg', 'kg-parked', 0, "
    "eid, 'JUSTID')\n"
    " elseif expire(id, q, eid, h, max, t) == 'f' then nf = nf + 1\n"
    " else nr = nr + 1 end\n"
    "end\n"
    "local deadset = {}\n"
    "for p = 0, 2 do\n"
    " local q = 'kg:q:' .. p\n"
    " for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', q, 'kg')) do\n"
    "  local name, pend = c[2], c[4]\n"
    "  if name ~= 'kg-sweep' and name ~= 'kg-parked' then\n"
    "   local seen = redis.call('ZSCORE', 'kg:workers', name)\n"
    "   local alive = seen and tonumber(seen) > t - ttl\n"
    "   if not alive and pend > 0 then\n"
    "    deadset[name] = true\n"
    "    local pl = redis.call('XPENDING', q, 'kg', '-', '+', 1000, name)\n"
    "    for _, pe in ipairs(pl) do\n"
    "     local cl = redis.call('XCLAIM', q, 'kg', 'kg-sweep', 0, pe[1])\n"
    "     if cl[1] then handle(q, pe[1], cl[1][2]) else "
    "redis.call('XACK', q, 'kg', pe[1]) end\n"
    "    end\n"
    "   elseif not seen and pend == 0 then\n"
    "    redis.call('XGROUP', 'DELCONSUMER', q, 'kg', name)\n"
    "   end\n"
    "  end\n"
    " end\n"
    /* expired leases: XAUTOCLAIM goes on from where the last sweep
       stopped and examines at most ~5,000 pending entries per stream
       (Redis >= 7 examines at most COUNT x 10 per call), so a sweep costs
       the same whatever the number of running tasks; past 5,000 of them
       a whole pass takes several sweeps (see docs/store.md) */
    " local ck = 'kg:sweepcur:' .. p\n"
    " local cur = redis.call('GET', ck) or '0-0'\n"
    " local budget = 5\n"
    " repeat\n"
    "  local r = redis.call('XAUTOCLAIM', q, 'kg', 'kg-sweep', lease, cur, "
    "'COUNT', 100)\n"
    "  cur = r[1] budget = budget - 1\n"
    "  for _, e in ipairs(r[2]) do\n"
    "   if type(e) == 'table' then handle(q, e[1], e[2]) end\n"
    "  end\n"
    " until cur == '0-0' or budget == 0\n"
    " redis.call('SET', ck, cur)\n"
    "end\n"
    "for _ in pairs(deadset) do dead = dead + 1 end\n"
    "return {nr, nf, dead}\n",
    /* ARGV: id, device, host, ttl_ms */
    [SC_REGISTER] =
        "local id, dev, host, ttl = ARGV[1], ARGV[2], ARGV[3], "
        "tonumber(ARGV[4])\n"
        "local tt = redis.call('TIME') local t = tonumber(tt[1]) * 1000 + "
        "math.floor(tonumber(tt[2]) / 1000)\n"
        "local dk = host .. '\\t' .. dev\n"
        "local owner = redis.call('HGET', 'kg:dev', dk)\n"
        "if owner and owner ~= id then\n"
        " local seen = redis.call('ZSCORE', 'kg:workers', owner)\n"
        " if seen and tonumber(seen) > t - ttl then\n"
        "  return redis.error_reply('ESTATE device ' .. dev .. ' on host ' .. "
        "host .. ' is held by live worker ' .. owner) end\n"
        " redis.call('DEL', 'kg:w:' .. owner) redis.call('ZREM', "
        "'kg:workers', owner)\n"
        "end\n"
        "local old = redis.call('HMGET', 'kg:w:' .. id, 'host', 'device')\n"
        "if old[1] then local odk = old[1] .. '\\t' .. old[2]\n"
        " if odk ~= dk and redis.call('HGET', 'kg:dev', odk) == id then "
        "redis.call('HDEL', 'kg:dev', odk) end end\n"
        "redis.call('HSET', 'kg:dev', dk, id)\n"
        "redis.call('HSET', 'kg:w:' .. id, 'device', dev, 'host', host, "
        "'seen', t) redis.call('HSETNX', 'kg:w:' .. id, 'reg', t)\n"
        "redis.call('ZADD', 'kg:workers', t, id)\n"
        "return 0\n",
    /* ARGV: id, lease_ms */
    [SC_HEARTBEAT] = LUA_PRELUDE
    "local w, lease = ARGV[1], tonumber(ARGV[2]) local t = now()\n"
    "if redis.call('EXISTS', 'kg:w:' .. w) == 0 then\n"
    " return redis.error_reply('NOTFOUND worker ' .. w .. ' is not "
    "registered') end\n"
    "redis.call('HSET', 'kg:w:' .. w, 'seen', t) "
    "redis.call('ZADD', 'kg:workers', t, w)\n"
    "for p = 0, 2 do\n"
    " local q = 'kg:q:' .. p\n"
    " local pl = redis.call('XPENDING', q, 'kg', '-', '+', 1000, w)\n"
    " for _, pe in ipairs(pl) do\n"
    "  local c = redis.call('XCLAIM', q, 'kg', w, 0, pe[1])\n"
    "  if type(c[1]) == 'table' and c[1][2] then\n"
    "   local id = c[1][2][2] local h = task(id)\n"
    "   if h and h.st == 1 and h.w == w and h.entry == pe[1] then "
    "redis.call('HSET', tk(id), 'dl', t + lease) end\n"
    "  end\n"
    " end\n"
    "end\n"
    "return 0\n",
    /* ARGV: id */
    [SC_UNREGISTER] = LUA_PRELUDE
    "local w = ARGV[1] local t = now()\n"
    "local old = redis.call('HMGET', 'kg:w:' .. w, 'host', 'device')\n"
    "if not old[1] then return redis.error_reply('NOTFOUND worker ' .. w "
    ".. ' is not registered') end\n"
    "local dk = old[1] .. '\\t' .. old[2]\n"
    "if redis.call('HGET', 'kg:dev', dk) == w then redis.call('HDEL', "
    "'kg:dev', dk) end\n"
    "redis.call('DEL', 'kg:w:' .. w) redis.call('ZREM', 'kg:workers', w)\n"
    "for p = 0, 2 do\n"
    " local q = 'kg:q:' .. p\n"
    " local pl = redis.call('XPENDING', q, 'kg', '-', '+', 1000, w)\n"
    " for _, pe in ipairs(pl) do\n"
    "  local c = redis.call('XCLAIM', q, 'kg', 'kg-sweep', 0, pe[1])\n"
    "  local e = c[1]\n"
    "  if type(e) == 'table' and e[2] then\n"
    "   local id = e[2][2] local h = task(id)\n"
    "   if h and h.st == 1 and h.w == w and h.entry == pe[1] then\n"
    "    drop(q, pe[1]) redis.call('HSET', tk(id), 'status', 0, 'dl', 0)\n"
    "    enqueue(id, h.p) count(1, h.p, '', -1) count(0, h.p, '', 1)\n"
    "   else drop(q, pe[1]) end\n"
    "  else redis.call('XACK', q, 'kg', pe[1]) end\n"
    " end\n"
    " redis.call('XGROUP', 'DELCONSUMER', q, 'kg', w)\n"
    "end\n"
    "return 0\n",
    /* ARGV: ttl_ms. Flat: now, then per worker id device host reg seen n */
    [SC_WLIST] = LUA_PRELUDE
    "local out = {tostring(now())} local held = {}\n"
    "for p = 0, 2 do\n"
    " local s = redis.call('XPENDING', 'kg:q:' .. p, 'kg')\n"
    " if type(s[4]) == 'table' then for _, c in ipairs(s[4]) do\n"
    "  held[c[1]] = (held[c[1]] or 0) + tonumber(c[2]) end end\n"
    "end\n"
    "for _, w in ipairs(redis.call('ZRANGE', 'kg:workers', 0, -1)) do\n"
    " local h = redis.call('HMGET', 'kg:w:' .. w, 'device', 'host', "
    "'reg', 'seen')\n"
    " if h[1] then\n"
    "  out[#out + 1] = w out[#out + 1] = h[1] out[#out + 1] = h[2]\n"
    "  out[#out + 1] = h[3] out[#out + 1] = h[4]\n"
    "  out[#out + 1] = tostring(held[w] or 0)\n"
    " end\n"
    "end\n"
    "return out\n",
    /* ARGV: ttl_ms. {alive, total, stats name/value pairs...} */
    [SC_COUNTS] = LUA_PRELUDE
    "local t = now()\n"
    "local alive = redis.call('ZCOUNT', 'kg:workers', '(' .. (t - "
    "tonumber(ARGV[1])), '+inf')\n"
    "local out = {alive, redis.call('ZCARD', 'kg:workers')}\n"
    "for _, v in ipairs(redis.call('HGETALL', 'kg:stats')) do "
    "out[#out + 1] = v end\n"
    "return out\n",
};

typedef struct rconn {
    redisContext *c;
} rconn;

typedef struct rd_store {
    kg_store base;
    char host[256];
    int port, db;
    char sha[SC_N][41];
    pthread_mutex_t mu; /* the pool */
    pthread_cond_t cv;
    rconn *conns;
    int nconns;
    int *idle;
    int nidle;
    int64_t down_until; /* fail fast after a failed connect (under mu) */
} rd_store;

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Sends one command; NULL (and the connection dropped) on I/O errors. */
static redisReply *cmd(rconn *rc, int argc, const char **argv,
                       const size_t *len, kg_err *err)
{
    redisReply *r = redisCommandArgv(rc->c, argc, argv, len);
    if (!r) {
        kg_errf(err, KG_EUNAVAIL, "redis: %s",
                rc->c->errstr[0] ? rc->c->errstr : "connection lost");
        redisFree(rc->c);
        rc->c = NULL;
    }
    return r;
}

static int reply_err(redisReply *r, kg_err *err)
{
    const char *s = r->str ? r->str : "error";
    if (!strncmp(s, "NOTFOUND ", 9))
        return kg_errf(err, KG_ENOTFOUND, "%s", s + 9);
    if (!strncmp(s, "ESTATE ", 7))
        return kg_errf(err, KG_ESTATE, "%s", s + 7);
    if (!strncmp(s, "LOADING", 7) || !strncmp(s, "BUSY", 4) ||
        !strncmp(s, "MISCONF", 7) || !strncmp(s, "READONLY", 8))
        return kg_errf(err, KG_EUNAVAIL, "redis: %s", s);
    return kg_errf(err, KG_EIO, "redis: %s", s);
}

/* Connects rc (SELECT db, groups, scripts). 0 or KG_EUNAVAIL/KG_EIO. */
static int rconnect(rd_store *s, rconn *rc, kg_err *err)
{
    rc->c = redisConnectWithTimeout(s->host, s->port, tv_ms(TIMEOUT_MS));
    if (!rc->c || rc->c->err) {
        int e = kg_errf(err, KG_EUNAVAIL, "redis %s:%d: %s", s->host, s->port,
                        rc->c ? rc->c->errstr : "out of memory");
        if (rc->c)
            redisFree(rc->c);
        rc->c = NULL;
        return e;
    }
    redisSetTimeout(rc->c, tv_ms(TIMEOUT_MS));
    redisEnableKeepAlive(rc->c);
    char db[16];
    snprintf(db, sizeof db, "%d", s->db);
    const char *sel[] = {"SELECT", db};
    redisReply *r = cmd(rc, 2, sel, NULL, err);
    if (!r)
        return KG_EUNAVAIL;
    int e = r->type == REDIS_REPLY_ERROR ? reply_err(r, err) : 0;
    freeReplyObject(r);
    for (int p = 0; e == 0 && p < KG_NPRIO; p++) {
        char q[32];
        snprintf(q, sizeof q, "kg:q:%d", p);
        const char *a[] = {"XGROUP", "CREATE", q, "kg", "0", "MKSTREAM"};
        if (!(r = cmd(rc, 6, a, NULL, err)))
            return KG_EUNAVAIL;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9))
            e = reply_err(r, err);
        freeReplyObject(r);
    }
    for (int i = 0; e == 0 && i < SC_N; i++) {
        const char *a[] = {"SCRIPT", "LOAD", SCRIPTS[i]};
        if (!(r = cmd(rc, 3, a, NULL, err)))
            return KG_EUNAVAIL;
        if (r->type == REDIS_REPLY_STRING && r->len == 40)
            memcpy(s->sha[i], r->str, 41);
        else
            e = r->type == REDIS_REPLY_ERROR
                    ? reply_err(r, err)
                    : kg_errf(err, KG_EIO, "redis: SCRIPT LOAD failed");
        freeReplyObject(r);
    }
    if (e < 0 && rc->c) {
        redisFree(rc->c);
        rc->c = NULL;
    }
    return e;
}

/* A pooled connection, connected; NULL with KG_EUNAVAIL in *code. */
static rconn *pool_get(rd_store *s, int *code, kg_err *err)
{
    pthread_mutex_lock(&s->mu);
    while (s->nidle == 0)
        pthread_cond_wait(&s->cv, &s->mu);
    rconn *rc = &s->conns[s->idle[--s->nidle]];
    int64_t down_until = s->down_until;
    pthread_mutex_unlock(&s->mu);
    if (rc->c)
        return rc;
    if (kg_store_now_ms() < down_until)
        *code = kg_errf(err, KG_EUNAVAIL, "redis %s:%d: unreachable", s->host,
                        s->port);
    else
        *code = rconnect(s, rc, err);
    if (*code == 0)
        return rc;
    pthread_mutex_lock(&s->mu);
    if (*code == KG_EUNAVAIL && kg_store_now_ms() >= down_until)
        s->down_until = kg_store_now_ms() + RETRY_CONNECT_MS;
    s->idle[s->nidle++] = (int)(rc - s->conns);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void pool_put(rd_store *s, rconn *rc)
{
    pthread_mutex_lock(&s->mu);
    s->idle[s->nidle++] = (int)(rc - s->conns);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/*
 * Runs script `which` with argv (argc values, lengths len or NULL for C
 * strings). Returns the reply (caller frees) or NULL with *code set; an
 * error reply is turned into *code too. A script cache lost with a Redis
 * restart is loaded again once.
 */
static redisReply *run(rd_store *s, int which, int argc, const char **argv,
                       const size_t *len, int *code, kg_err *err)
{
    const char *a[64];
    size_t l[64];
    const char **av = a;
    size_t *lv = l;
    if (argc + 3 > 64) {
        av = malloc((size_t)(argc + 3) * sizeof *av);
        lv = malloc((size_t)(argc + 3) * sizeof *lv);
        if (!av || !lv) {
            free(av);
            free(lv);
            *code = kg_errf(err, KG_ENOMEM, "out of memory");
            return NULL;
        }
    }
    redisReply *r = NULL;
    *code = 0;
    rconn *rc = pool_get(s, code, err);
    if (!rc)
        goto out;
    for (int attempt = 0; attempt < 2; attempt++) {
        av[0] = "EVALSHA";
        av[1] = s->sha[which];
        av[2] = "0";
        lv[0] = 7;
        lv[1] = 40;
        lv[2] = 1;
        for (int i = 0; i < argc; i++) {
            av[3 + i] = argv[i];
            lv[3 + i] = len ? len[i] : strlen(argv[i]);
        }
        r = redisCommandArgv(rc->c, argc + 3, av, lv);
        if (!r) {
            *code =
                kg_errf(err, KG_EUNAVAIL, "redis: %s",
                        rc->c->errstr[0] ? rc->c->errstr : "connection lost");
            redisFree(rc->c);
            rc->c = NULL;
            break;
        }
        if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOSCRIPT", 8) &&
            attempt == 0) {
            freeReplyObject(r);
            r = NULL;
            redisFree(rc->c);
            rc->c = NULL;
            if ((*code = rconnect(s, rc, err)) < 0)
                break;
            continue;
        }
        break;
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        *code = reply_err(r, err);
        freeReplyObject(r);
        r = NULL;
    }
    pool_put(s, rc);
out:
    if (av != a) {
        free(av);
        free(lv);
    }
    return r;
}

/* A plain command (not a script) on a pooled connection. */
static redisReply *plain(rd_store *s, int argc, const char **argv,
                         const size_t *len, int *code, kg_err *err)
{
    *code = 0;
    rconn *rc = pool_get(s, code, err);
    if (!rc)
        return NULL;
    redisReply *r = cmd(rc, argc, argv, len, err);
    if (!r)
        *code = KG_EUNAVAIL;
    else if (r->type == REDIS_REPLY_ERROR) {
        *code = reply_err(r, err);
        freeReplyObject(r);
        r = NULL;
    }
    pool_put(s, rc);
    return r;
}

static int64_t num(const redisReply *r)
{
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strtoll(r->str, NULL, 10);
    return 0;
}

static void str(char *dst, size_t size, const redisReply *r)
{
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
        snprintf(dst, size, "%.*s", (int)r->len, r->str);
    else
        dst[0] = 0;
}

static int set_json(json_t **dst, const redisReply *r, const char *id,
                    const char *what, kg_err *err)
{
    *dst = NULL;
    if (!r || r->type != REDIS_REPLY_STRING || r->len == 0)
        return 0;
    if (!(*dst = kg_store_json_parse(r->str, r->len)))
        return kg_errf(err, KG_EPARSE, "task %s: stored %s is corrupt", id,
                       what);
    return 0;
}

/*
 * Both submissions in one script: cached NULL for kg_store_submit_batch
 * (no lookups), else kg_store_submit_batch_cached's array.
 */
static int rd_submit(rd_store *s, const kg_submit *t, size_t n, int *created,
                     json_t **cached, kg_err *err)
{
    size_t argc = 1 + 6 * n;
    const char **av = calloc(argc, sizeof *av);
    size_t *lv = calloc(argc, sizeof *lv);
    char **texts = calloc(n, sizeof *texts);
    char cnt[24], prio[KG_NPRIO][16];
    int code = 0;
    if (!av || !lv || !texts) {
        code = kg_errf(err, KG_ENOMEM, "out of memory");
        goto out;
    }
    for (int p = 0; p < KG_NPRIO; p++)
        snprintf(prio[p], sizeof prio[p], "%d", p);
    snprintf(cnt, sizeof cnt, "%zu", n);
    av[0] = cnt;
    lv[0] = strlen(cnt);
    for (size_t i = 0; i < n; i++) {
        if (!(texts[i] = kg_store_json_text(t[i].request))) {
            code = kg_errf(err, KG_ENOMEM, "out of memory");
            goto out;
        }
        const char *ck = t[i].cache_key ? t[i].cache_key : "";
        int uc = cached && ck[0] && !t[i].replace_finished;
        const char *v[6] = {t[i].id,  prio[t[i].priority],
                            ck,       texts[i],
                            t[i].replace_finished ? "1" : "0",
                            uc ? "1" : "0"};
        for (int k = 0; k < 6; k++) {
            av[1 + 6 * i + (size_t)k] = v[k];
            lv[1 + 6 * i + (size_t)k] = strlen(v[k]);
        }
    }
    redisReply *r = run(s, SC_SUBMIT, (int)argc, av, lv, &code, err);
    if (r) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == n) {
            for (size_t i = 0; i < n; i++) {
                const redisReply *e = r->element[i];
                if (cached && e->type == REDIS_REPLY_STRING) {
                    created[i] = 2;
                    if (!(cached[i] = kg_store_json_parse(e->str, e->len))) {
                        code = kg_errf(err, KG_EPARSE,
                                       "cache entry is corrupt");
                        break;
                    }
                } else {
                    created[i] = (int)num(e);
                }
            }
        } else {
            code = kg_errf(err, KG_EIO, "redis: unexpected submit reply");
        }
        freeReplyObject(r);
    }
out:
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(av);
    free(lv);
    return code;
}

static int rd_submit_batch(kg_store *base, const kg_submit *t, size_t n,
                           int *created, kg_err *err)
{
    return rd_submit((rd_store *)base, t, n, created, NULL, err);
}

static int rd_submit_batch_cached(kg_store *base, const kg_submit *t, size_t n,
                                  int *created, json_t **cached, kg_err *err)
{
    return rd_submit((rd_store *)base, t, n, created, cached, err);
}

static const char *const GET_FIELDS[] = {"prio", "status", "ck",  "att",
                                         "w",    "avoid",  "sub", "start",
                                         "fin",  "dl",     "req", "res"};

static int rd_get(kg_store *base, const char *id, unsigned what, kg_task *out,
                  kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char key[16 + KG_MAX_TASK_ID];
    snprintf(key, sizeof key, "kg:t:%.*s", KG_MAX_TASK_ID, id);
    const char *av[2 + 12];
    int argc = 2;
    av[0] = "HMGET";
    av[1] = key;
    for (int i = 0; i < 10; i++)
        av[argc++] = GET_FIELDS[i];
    av[argc++] = what & KG_GET_REQUEST ? "req" : "-";
    av[argc++] = what & KG_GET_RESULT ? "res" : "-";
    int code;
    redisReply *r = plain(s, argc, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 12) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected reply");
    }
    redisReply **e = r->element;
    if (e[1]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return kg_errf(err, KG_ENOTFOUND, "no task %s", id);
    }
    snprintf(out->id, sizeof out->id, "%s", id);
    out->priority = (int)num(e[0]);
    out->status = (int)num(e[1]);
    str(out->cache_key, sizeof out->cache_key, e[2]);
    out->attempts = (int)num(e[3]);
    str(out->worker, sizeof out->worker, e[4]);
    str(out->avoid_worker, sizeof out->avoid_worker, e[5]);
    out->submitted_ms = num(e[6]);
    out->started_ms = num(e[7]);
    out->finished_ms = num(e[8]);
    out->lease_deadline_ms = num(e[9]);
    code = set_json(&out->request, e[10], id, "request", err);
    if (code == 0)
        code = set_json(&out->result, e[11], id, "result", err);
    if (code < 0)
        kg_task_free(out);
    freeReplyObject(r);
    return code;
}

static int rd_lease(kg_store *base, const char *worker_id, unsigned what,
                    kg_task *out, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)base->opts.lease_ms);
    const char *av[] = {worker_id, lease};
    int code;
    redisReply *r = run(s, SC_LEASE, 2, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return 0;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 9) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected lease reply");
    }
    redisReply **e = r->element;
    str(out->id, sizeof out->id, e[0]);
    out->priority = (int)num(e[1]);
    out->status = KG_TASK_RUNNING;
    str(out->cache_key, sizeof out->cache_key, e[2]);
    out->attempts = (int)num(e[3]);
    snprintf(out->worker, sizeof out->worker, "%s", worker_id);
    str(out->avoid_worker, sizeof out->avoid_worker, e[4]);
    out->submitted_ms = num(e[5]);
    out->started_ms = num(e[6]);
    out->lease_deadline_ms = num(e[7]);
    if (what & KG_GET_REQUEST_TEXT) {
        code = 0;
        if (e[8]->type == REDIS_REPLY_STRING &&
            !(out->request_text = strndup(e[8]->str, e[8]->len)))
            code = kg_errf(err, KG_ENOMEM, "out of memory");
    } else {
        code = set_json(&out->request, e[8], out->id, "request", err);
    }
    freeReplyObject(r);
    return code < 0 ? code : 1;
}

/* The message of an ESTATE reply from complete/retry. */
static int held_err(int code, const char *id, const char *worker_id,
                    kg_err *err)
{
    if (code == KG_ESTATE) {
        int st = err ? atoi(err->msg) : -1;
        return kg_errf(err, KG_ESTATE,
                       "task %s is %s and not held by worker %s", id,
                       kg_task_status_name(st), worker_id);
    }
    return code;
}

static int rd_complete(kg_store *base, const char *id, const char *worker_id,
                       int status, const json_t *result, int verdict,
                       kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char *res = kg_store_json_text(result);
    if (!res)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char st[8], v[8];
    snprintf(st, sizeof st, "%d", status);
    snprintf(v, sizeof v, "%d", verdict);
    const char *av[] = {id, worker_id, st, res, v};
    int code;
    redisReply *r = run(s, SC_COMPLETE, 5, av, NULL, &code, err);
    free(res);
    if (r)
        freeReplyObject(r);
    return held_err(code, id, worker_id, err);
}

static int rd_retry(kg_store *base, const char *id, const char *worker_id,
                    const json_t *result, int64_t avoid_ms, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char *res = result ? kg_store_json_text(result) : NULL;
    if (result && !res)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char avoid[24];
    snprintf(avoid, sizeof avoid, "%lld", (long long)avoid_ms);
    const char *av[] = {id, worker_id, res ? res : "", avoid};
    int code;
    redisReply *r = run(s, SC_RETRY, 4, av, NULL, &code, err);
    free(res);
    if (r)
        freeReplyObject(r);
    return held_err(code, id, worker_id, err);
}

static int rd_cancel(kg_store *base, const char *id, kg_err *err)
{
    const char *av[] = {id};
    int code;
    redisReply *r = run((rd_store *)base, SC_CANCEL, 1, av, NULL, &code, err);
    if (!r)
        return code;
    code = (int)num(r);
    freeReplyObject(r);
    return code;
}

static int rd_requeue_expired(kg_store *base, int max_attempts,
                              kg_requeue_counts *out, kg_err *err)
{
    char lease[24], ttl[24], max[16];
    snprintf(lease, sizeof lease, "%lld", (long long)base->opts.lease_ms);
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    snprintf(max, sizeof max, "%d", max_attempts);
    const char *av[] = {lease, ttl, max};
    int code;
    redisReply *r = run((rd_store *)base, SC_SWEEP, 3, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        out->requeued = (int)num(r->element[0]);
        out->failed = (int)num(r->element[1]);
        out->dead_workers = (int)num(r->element[2]);
    } else {
        code = kg_errf(err, KG_EIO, "redis: unexpected sweep reply");
    }
    freeReplyObject(r);
    return code;
}

static int rd_cache_get(kg_store *base, const char *key, json_t **result,
                        kg_err *err)
{
    char k[80];
    snprintf(k, sizeof k, "kg:c:%s", key);
    const char *av[] = {"GET", k};
    int code;
    redisReply *r = plain((rd_store *)base, 2, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type == REDIS_REPLY_STRING) {
        *result = kg_store_json_parse(r->str, r->len);
        code = *result ? 1 : kg_errf(err, KG_EPARSE, "cache entry is corrupt");
    }
    freeReplyObject(r);
    return code;
}

/* Every key in one MGET (one round trip for a whole batch). */
static int rd_cache_get_many(kg_store *base, const char *const *keys, size_t n,
                             json_t **results, kg_err *err)
{
    const char **av = calloc(n + 1, sizeof *av);
    char(*k)[80] = calloc(n, sizeof *k);
    size_t *at = calloc(n, sizeof *at), m = 0;
    int code = 0, hits = 0;
    if (!av || !k || !at) {
        code = kg_errf(err, KG_ENOMEM, "out of memory");
        goto out;
    }
    av[0] = "MGET";
    for (size_t i = 0; i < n; i++)
        if (keys[i]) {
            snprintf(k[m], sizeof k[m], "kg:c:%s", keys[i]);
            av[1 + m] = k[m];
            at[m++] = i;
        }
    if (m == 0)
        goto out;
    redisReply *r = plain((rd_store *)base, (int)(m + 1), av, NULL, &code, err);
    if (!r)
        goto out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != m) {
        code = kg_errf(err, KG_EIO, "redis: unexpected MGET reply");
    } else {
        for (size_t j = 0; j < m && code == 0; j++) {
            redisReply *e = r->element[j];
            if (e->type != REDIS_REPLY_STRING)
                continue;
            results[at[j]] = kg_store_json_parse(e->str, e->len);
            if (!results[at[j]])
                code = kg_errf(err, KG_EPARSE, "cache entry is corrupt");
            else
                hits++;
        }
    }
    freeReplyObject(r);
out:
    free(av);
    free(k);
    free(at);
    return code < 0 ? code : hits;
}

static int rd_cache_put(kg_store *base, const char *key, const json_t *result,
                        kg_err *err)
{
    char k[80];
    snprintf(k, sizeof k, "kg:c:%s", key);
    char *text = kg_store_json_text(result);
    if (!text)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    const char *av[] = {"SET", k, text};
    int code;
    redisReply *r = plain((rd_store *)base, 3, av, NULL, &code, err);
    free(text);
    if (r)
        freeReplyObject(r);
    return code;
}

static int rd_counts(kg_store *base, kg_store_counts *out, kg_err *err)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    const char *av[] = {ttl};
    int code;
    redisReply *r = run((rd_store *)base, SC_COUNTS, 1, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected counts reply");
    }
    out->workers_alive = num(r->element[0]);
    out->workers_dead = num(r->element[1]) - out->workers_alive;
    for (size_t i = 2; i + 1 < r->elements; i += 2) {
        char name[64];
        str(name, sizeof name, r->element[i]);
        long long v = num(r->element[i + 1]);
        int k = name[0] && name[1] ? atoi(name + 1) : -1;
        if (name[0] == 's' && k >= 0 && k < KG_NSTATUS && name[1] != 't')
            out->by_status[k] = v;
        else if (name[0] == 'p' && k >= 0 && k < KG_NPRIO)
            out->pending[k] = v;
        else if (name[0] == 'v' && k >= 0 && k < KG_NVERDICT)
            out->by_verdict[k] = v;
        else if (!strcmp(name, "lease_expiries"))
            out->lease_expiries = v;
    }
    freeReplyObject(r);
    return 0;
}

static int rd_worker_register(kg_store *base, const char *id,
                              const char *device, const char *host, kg_err *err)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    const char *av[] = {id, device, host, ttl};
    int code;
    redisReply *r = run((rd_store *)base, SC_REGISTER, 4, av, NULL, &code, err);
    if (r)
        freeReplyObject(r);
    return code;
}

static int rd_worker_heartbeat(kg_store *base, const char *id, kg_err *err)
{
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)base->opts.lease_ms);
    const char *av[] = {id, lease};
    int code;
    redisReply *r =
        run((rd_store *)base, SC_HEARTBEAT, 2, av, NULL, &code, err);
    if (r)
        freeReplyObject(r);
    return code;
}

static int rd_worker_unregister(kg_store *base, const char *id, kg_err *err)
{
    const char *av[] = {id};
    int code;
    redisReply *r =
        run((rd_store *)base, SC_UNREGISTER, 1, av, NULL, &code, err);
    if (r)
        freeReplyObject(r);
    return code;
}

static int cmp_worker(const void *a, const void *b)
{
    return strcmp(((const kg_worker *)a)->id, ((const kg_worker *)b)->id);
}

static int rd_worker_list(kg_store *base, kg_worker **out, size_t *n,
                          kg_err *err)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    const char *av[] = {ttl};
    int code;
    redisReply *r = run((rd_store *)base, SC_WLIST, 1, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        (r->elements - 1) % 6) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected workers reply");
    }
    int64_t now = num(r->element[0]);
    size_t cnt = (r->elements - 1) / 6;
    kg_worker *v = cnt ? calloc(cnt, sizeof *v) : NULL;
    if (cnt && !v) {
        freeReplyObject(r);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cnt; i++) {
        redisReply **e = r->element + 1 + 6 * i;
        str(v[i].id, sizeof v[i].id, e[0]);
        str(v[i].device, sizeof v[i].device, e[1]);
        str(v[i].host, sizeof v[i].host, e[2]);
        v[i].registered_ms = num(e[3]);
        v[i].last_seen_ms = num(e[4]);
        v[i].running = (int)num(e[5]);
        v[i].alive = v[i].last_seen_ms > now - base->opts.worker_ttl_ms;
    }
    freeReplyObject(r);
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, cmp_worker);
    *out = v;
    *n = cnt;
    return 0;
}

static int rd_describe(kg_store *base, char *buf, size_t size, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char ver[32] = "?", aof[16] = "?", fsync[16] = "?";
    const char *info[] = {"INFO", "server"};
    int code;
    redisReply *r = plain(s, 2, info, NULL, &code, err);
    if (!r)
        return code;
    const char *p = r->str ? strstr(r->str, "redis_version:") : NULL;
    if (p)
        sscanf(p + 14, "%31[^\r\n]", ver);
    freeReplyObject(r);
    const char *cfg[] = {"CONFIG", "GET", "append*"};
    r = plain(s, 3, cfg, NULL, &code, NULL); /* CONFIG may be disabled */
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            if (!r->element[i]->str || !r->element[i + 1]->str)
                continue;
            if (!strcmp(r->element[i]->str, "appendonly"))
                snprintf(aof, sizeof aof, "%s", r->element[i + 1]->str);
            else if (!strcmp(r->element[i]->str, "appendfsync"))
                snprintf(fsync, sizeof fsync, "%s", r->element[i + 1]->str);
        }
    if (r)
        freeReplyObject(r);
    snprintf(buf, size,
             "redis %s:%d/%d, redis %s, appendonly=%s appendfsync=%s%s",
             s->host, s->port, s->db, ver, aof, fsync,
             strcmp(aof, "yes") ? " (WARNING: without AOF a crash of Redis "
                                  "loses accepted tasks)"
                                : "");
    return 0;
}

static void rd_close(kg_store *base)
{
    rd_store *s = (rd_store *)base;
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].c)
            redisFree(s->conns[i].c);
    free(s->conns);
    free(s->idle);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static const struct kg_store_ops REDIS_OPS = {
    .name = "redis",
    .close = rd_close,
    .describe = rd_describe,
    .submit_batch = rd_submit_batch,
    .submit_batch_cached = rd_submit_batch_cached,
    .get = rd_get,
    .lease = rd_lease,
    .complete = rd_complete,
    .retry = rd_retry,
    .cancel = rd_cancel,
    .requeue_expired = rd_requeue_expired,
    .cache_get = rd_cache_get,
    .cache_put = rd_cache_put,
    .cache_get_many = rd_cache_get_many,
    .counts = rd_counts,
    .worker_register = rd_worker_register,
    .worker_heartbeat = rd_worker_heartbeat,
    .worker_unregister = rd_worker_unregister,
    .worker_list = rd_worker_list,
};

int kg_store_redis_open(kg_store **out, const char *host, int port, int db,
                        const kg_store_opts *opts, kg_err *err)
{
    *out = NULL;
    rd_store *s = calloc(1, sizeof *s);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    s->base.ops = &REDIS_OPS;
    s->base.opts = *opts;
    snprintf(s->host, sizeof s->host, "%s", host);
    s->port = port;
    s->db = db;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->conns = calloc((size_t)opts->pool_size, sizeof *s->conns);
    s->idle = calloc((size_t)opts->pool_size, sizeof *s->idle);
    if (!s->conns || !s->idle) {
        rd_close(&s->base);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    s->nconns = opts->pool_size;
    for (int i = s->nconns - 1; i >= 0; i--)
        s->idle[s->nidle++] = i;
    /* one connection now: an unreachable server fails the open */
    int rc = rconnect(s, &s->conns[0], err);
    if (rc < 0) {
        rd_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
