-- POST /evaluate, one task per request, every kernel distinct (no cache hits)
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  local body = string.format(
    '{"reference_code": "import torch\\nclass Model(torch.nn.Module): pass\\n", ' ..
    '"kernel_code": "class ModelNew: pass  # %d-%d", "backend": "cpu"}',
    math.random(1, 1000000000), n)
  return wrk.format(nil, "/evaluate", nil, body)
end
