-- POST an order with the access token given as the script's first
-- argument and an identifier of its own on every request (the run's
-- nonce, given as the second argument, the thread, then a counter), so
-- that each is claimed once, in this run and across runs: duplicate
-- protection's whole path, never a replay.
local threads = 0

setup = function(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
local headers = {["Content-Type"] = "application/json"}

local nonce = ""

init = function(args)
  headers["Authorization"] = "Bearer " .. args[1]
  nonce = args[2]
end

request = function()
  n = n + 1
  local body = '{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"b' ..
    nonce .. '-' .. tid .. '-' .. n .. '"}'
  return wrk.format("POST", nil, headers, body)
end
