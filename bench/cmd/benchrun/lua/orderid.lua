-- POST an order with the access token given as the script's argument and
-- an identifier of its own on every request (thread, then a counter), so
-- that each is claimed once: duplicate protection's whole path.
local threads = 0

setup = function(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
local headers = {["Content-Type"] = "application/json"}

init = function(args)
  headers["Authorization"] = "Bearer " .. args[1]
end

request = function()
  n = n + 1
  local body = '{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"b' ..
    tid .. '-' .. n .. '-' .. math.random(1, 1000000000) .. '"}'
  return wrk.format("POST", nil, headers, body)
end
