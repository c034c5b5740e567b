-- GET with a different token on every request: each thread cycles
-- through its own pool of args[1] tokens, so the limiter sees
-- threads × args[1] distinct keys and no two consecutive decisions share
-- one. (wrk's Lua cannot tell its connections apart, so a pool far larger
-- than the connection count stands in for "one token per connection".)
-- Requests are formatted once in init, so request() costs a table lookup.
local threads = 0

setup = function(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local pool = {}
local n = 0
local i = 0

init = function(args)
  n = tonumber(args[1])
  for k = 1, n do
    pool[k] = wrk.format("GET", nil, {["Authorization"] = "Bearer bench-" .. tid .. "-" .. k})
  end
end

request = function()
  i = i % n + 1
  return pool[i]
end
