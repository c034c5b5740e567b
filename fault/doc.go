// Package fault holds exgate's fault-injection suite: tests only, run by
// `make test` with the rest of the suite.
//
// Each test builds the real binaries (cmd/exgate and cmd/exchange-sim,
// without the race detector, once per run), starts them on free loopback
// ports with real redis-server processes (internal/redistest), breaks
// something while real HTTP traffic flows, and asserts what exgate does:
//
//   - TestRedisKilledUnderLoad: Redis killed under load → behaviour exactly
//     per limiter.on_store_error (local, open, closed), no undeclared 5xx,
//     every error JSON; Redis restarted → decisions in Redis again, no
//     gateway restart.
//   - TestRedisSlow: Redis paused (CLIENT PAUSE) or blocked (DEBUG SLEEP) →
//     every request answered by the local fallback, the store deadline
//     (limiter.redis.timeout) counted as what ended the calls.
//   - TestSentinelFailover, TestClusterFailover: the Redis master killed
//     (SIGKILL) or frozen (SIGSTOP) under load through two exgate
//     replicas, in a Sentinel setup (a master, a replica, three
//     Sentinels) and a Cluster (three masters with a replica each), the
//     old master brought back as a replica afterwards →
//     decisions in the new master again after the promotion is
//     announced (how soon is logged), every request answered, every
//     fallback counted, /readyz back to 200, per-address admissions within the
//     bound of docs/limits.md, no order identifier placed twice, orders
//     placed again once the new master has a replica. Every order's
//     answer is checked against the backend's record of its X-Request-ID:
//     a 201 was placed by the backend (a replay: earlier, and not sent
//     again), a 409 or 503 never reached it, and every order it placed
//     was answered 201; its access log line carries the same status,
//     the code of exgate's refusal and whether it was a replay. The
//     gateways run with their access log on, and every request carries
//     an X-Request-ID naming its kind and gateway. A request whose
//     client got no answer at all (a bare EOF) fails the test with the
//     gateways' access log lines for its X-Request-ID, the backend's
//     record of it, and the gateways' 499, aborted, panic and net/http
//     error lines.
//   - TestBackendFaults: backend killed or slower than the route timeout →
//     502/504 in exgate's JSON error shape; goroutines back to the baseline
//     afterwards.
//   - TestOverloadShedsMarketDataBeforeCancels: 32 clients against a
//     backend of 4 workers → the backend never holds more than exgate's
//     limit and the cancels' headroom, no cancel or placement shed,
//     market data shed, the limit recovering once the surge ends.
//   - TestBackendMisbehaviour: connects that time out (a full accept
//     queue), with and without a capped pool (upstream.max_conns_per_host),
//     resets, a backend that accepts and never answers behind a capped pool
//     (requests queue past their deadline), one that closes mid request
//     body and one that breaks its response off → every client gets a JSON
//     502/504 (or, for a response already under way, a dropped
//     connection), the process stays up, goroutines and heap return to
//     their baseline.
//   - TestSIGTERMWithOrdersInFlight: SIGTERM with 1,000 orders in flight →
//     every client gets a complete answer, the orders the backend placed
//     equal the 2xx answers, exit code 0.
//   - TestKeepAliveIdleTimeout: orders on keep-alive connections idle
//     for about server.idle_timeout → from a client that keeps idle
//     connections longer than exgate, some get a bare EOF (Go's client
//     does not resend a POST written into a connection exgate has just
//     closed), and every one of them was never read by exgate (no access
//     log line, never at the backend); from a client that closes idle
//     connections first, none fails.
//   - TestKeepAliveUnusedConnection: the same on pooled connections that
//     have carried no request (Go's transport pools a connection it
//     dialed for a request another connection carried), which exgate
//     closes at server.read_header_timeout, not idle_timeout → from a
//     client that keeps them longer, some orders get no answer, none
//     read by exgate; from a client whose idle timeout is below
//     read_header_timeout, none fails.
//   - TestSlowloris: hundreds of connections trickling header bytes do not
//     keep normal clients from being served, and read_header_timeout
//     closes them.
//   - TestHeldUploadsBuffered: 300 chunked uploads of 1 MiB held open on a
//     default-route path from one address → exgate reads every body whole
//     before the backend hears of its request: the backend sees none of
//     them; exgate holds at most half of server.max_buffered_bytes for the
//     address (32 held whole), refuses the rest 503 server_busy, and its
//     resident memory grows by less than 128 MiB (about +40 MiB: bodies
//     fill pooled buffers of 8 KiB as they arrive, never grown by copies);
//     goroutines, heap and the body budget return to their baseline once
//     the clients close.
//   - TestWorstCasePerAddress: one address with 500 invented tokens on
//     every route → the Redis keys and bytes and the heap exgate holds stay
//     within the per-address bounds of docs/limits.md (≈ 12 KB of Redis,
//     no duplicate-protection key for refused orders).
//   - TestMemoryLimiterManyAddresses: a million distinct client addresses
//     against the in-process limiter → memory bounded by limiter.max_keys.
//
// Every assertion here holds on any machine, however busy: what exgate
// answers, counts, places and bounds, never how fast. A deadline in a
// test only bounds a hang (a request never answered, a gateway that never
// recovers), and is far beyond the figure it stands for, which is logged.
// Speed targets live in `make bench`.
package fault
