-- GET without a token: one client address, so one limiter key.
wrk.method = "GET"
