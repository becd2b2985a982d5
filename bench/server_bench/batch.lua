-- POST /evaluate/batch with BATCH tasks per request (default 100)
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local size = tonumber(os.getenv("BATCH") or "100")
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
