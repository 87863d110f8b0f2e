-- wrk script: small non-streaming chat completions with the model in the JSON body.
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"bench","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":16}'

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f status_errors=%d socket_errors=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.status, e.connect + e.read + e.write + e.timeout))
end
