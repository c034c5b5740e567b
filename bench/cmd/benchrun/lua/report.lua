-- Appended to every benchmark script by benchrun: prints one line that
-- benchrun parses. Latencies are in microseconds.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCHJSON {\"requests\":%d,\"duration_us\":%d,\"p50_us\":%.0f,\"p90_us\":%.0f," ..
    "\"p99_us\":%.0f,\"max_us\":%.0f,\"connect\":%d,\"read\":%d,\"write\":%d," ..
    "\"status\":%d,\"timeout\":%d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
