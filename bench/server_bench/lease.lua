-- POST /worker/lease from WORKERS registered workers (bw-0 .. bw-N-1), no wait
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local workers = tonumber(os.getenv("WORKERS") or "64")
request = function()
  local w = math.random(0, workers - 1)
  return wrk.format(nil, "/worker/lease", nil,
                    string.format('{"worker_id": "bw-%d", "wait_s": 0}', w))
end
-- No response() callback: wrk would hand every reply to Lua (headers and
-- body), costing CPU on the machine under test, and nothing read it. run.sh
-- reports the queue depth before and after instead.
