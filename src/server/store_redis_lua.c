/*
 * store_redis_lua.c - the Redis store's Lua scripts, one per operation
 * (rd__scripts, indexed by SC_*), each atomic and one round trip; the
 * prelude of helpers every script shares.
 */
#include "server/store_redis.h"

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

const char *const rd__scripts[SC_N] = {
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
    "local n = 0\n"
    "for p = 0, 2 do\n"
    " local q = 'kg:q:' .. p\n"
    " local pl = redis.call('XPENDING', q, 'kg', '-', '+', 1000, w)\n"
    " n = n + #pl\n"
    " for _, pe in ipairs(pl) do\n"
    "  local c = redis.call('XCLAIM', q, 'kg', w, 0, pe[1])\n"
    "  if type(c[1]) == 'table' and c[1][2] then\n"
    "   local id = c[1][2][2] local h = task(id)\n"
    "   if h and h.st == 1 and h.w == w and h.entry == pe[1] then "
    "redis.call('HSET', tk(id), 'dl', t + lease) end\n"
    "  end\n"
    " end\n"
    "end\n"
    "return n\n",
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
    /* ARGV: task ids. Each one's status, -1 for no such task (reads
       only: nothing is written, so no wait for the AOF) */
    [SC_STATUS] = LUA_PRELUDE
    "local out = {}\n"
    "for i, id in ipairs(ARGV) do\n"
    " out[i] = tonumber(redis.call('HGET', tk(id), 'status') or -1)\n"
    "end\n"
    "return out\n",
};
