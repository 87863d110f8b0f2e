-- wrk script: small non-streaming chat completions, the same load as
-- `flexinfer-sim selftest`.
--   wrk -t2 -c32 -d10s -s conformance/bench/wrk-chat.lua http://127.0.0.1:8000
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"sim-model","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":16}'

-- wrk counts non-2xx/3xx answers as status errors; print them with the percentiles.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("p50 %.3f ms  p99 %.3f ms  status errors %d  socket errors %d\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.status, e.connect + e.read + e.write + e.timeout))
end
