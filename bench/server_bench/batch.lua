-- POST /evaluate/batch with BATCH tasks per request (default 100).
-- RATE=T paces the 64 connections (CONNS) to T tasks/s in all, to read the
-- latency at a given throughput rather than at saturation.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local size = tonumber(os.getenv("BATCH") or "100")
local rate = tonumber(os.getenv("RATE") or "0")
local conns = tonumber(os.getenv("CONNS") or "64")
if rate > 0 then
  -- ms before each request: uniform around the mean, so the connections do
  -- not send in step (in step, 64 batches land at the same instant)
  local mean = conns * size * 1000 / rate
  delay = function() return math.random() * 2 * mean end
end
local n = 0
request = function()
  local parts = {}
  local r = math.random(1, 1000000000)
  for i = 1, size do
    n = n + 1
    parts[i] = string.format(
      '{"reference_code": "import torch\\nclass Model(torch.nn.Module): pass\\n", ' ..
      '"kernel_code": "class ModelNew: pass  # b%d-%d", "backend": "cpu"}', r, n)
  end
  return wrk.format(nil, "/evaluate/batch", nil,
                    '{"tasks": [' .. table.concat(parts, ", ") .. ']}')
end
