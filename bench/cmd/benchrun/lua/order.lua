-- POST an order with the access token given as the script's argument.
wrk.method = "POST"
wrk.body = '{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}'
wrk.headers["Content-Type"] = "application/json"

init = function(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
end
