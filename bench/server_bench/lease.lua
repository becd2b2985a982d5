-- POST /worker/lease from WORKERS registered workers (bw-0 .. bw-N-1), no wait
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local workers = tonumber(os.getenv("WORKERS") or "64")
-- each worker's worker_secret (run.sh writes them, one a line, bw-0 first):
-- a lease needs the secret its id registered with
local secrets = {}
for line in io.lines(os.getenv("SECRETS")) do
  secrets[#secrets + 1] = line
end
request = function()
  local w = math.random(0, workers - 1)
  return wrk.format(nil, "/worker/lease", nil,
                    string.format('{"worker_id": "bw-%d", "worker_secret": "%s", "wait_s": 0}',
                                  w, secrets[w + 1] or ""))
end
-- No response() callback: wrk would hand every reply to Lua (headers and
-- body), costing CPU on the machine under test, and nothing read it. run.sh
-- reports the queue depth before and after instead.
