-- The overload surge's market data: GET with X-Forwarded-For naming one
-- of 4096 client addresses per thread, a different one on every request
-- (exgate trusts 127.0.0.1 as a proxy in the surge). Requests are
-- formatted once in init, so request() costs a table lookup.
local threads = 0

setup = function(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local pool = {}
local n = 4096
local i = 0

init = function(args)
  for k = 1, n do
    local addr = string.format("10.%d.%d.%d", tid, math.floor((k - 1) / 256), (k - 1) % 256)
    pool[k] = wrk.format("GET", nil, {["X-Forwarded-For"] = addr})
  end
end

request = function()
  i = i % n + 1
  return pool[i]
end
