package proxy

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestHeaderValuesOfConcurrentRequests: the header values exgate makes for
// a request (its X-Request-ID, the one made unique for the backend, its
// X-Real-IP and RateLimit fields; fb26dcf, 33120d9) are its own, and never
// changed once handed out, under many concurrent clients on kept-alive
// connections with a backend that answers in every way: echoing the id,
// with none, with its own, with two, after a 103 Early Hints, with
// trailers, with rate-limit fields of its own; some clients sharing one
// id, some sending none, some refused (429). Each answer carries exactly
// its request's id; the backend gets that id with a part of exgate's, and
// the client's address; and every access log line, read after all the
// traffic, still holds the id its client was answered with (a value whose
// bytes were reused would have changed). Run with -race.
func TestHeaderValuesOfConcurrentRequests(t *testing.T) {
	const workers, perWorker = 8, 120
	e := startLimited(t, nil, func(c *config.Config) {
		rt := c.Route("list_matches")
		rt.Limits = []config.Limit{{Key: config.KeyAddress, Rate: config.Rate{N: workers * perWorker * 3 / 4, Period: time.Hour}}}
		c.Log.RefusalsPerClient = config.RefusalShare{} // every 429's line too, past one address's share of them
	})
	e.backend.handler = answerInEveryWay
	modes := []string{"echo", "none", "own", "two", "early", "trailer", "ratelimit"}
	var (
		mu      sync.Mutex
		answers []string // every X-Request-ID clients were answered with
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for i := range perWorker {
				mode := modes[(w+i)%len(modes)]
				id := ""
				switch i % 3 {
				case 0:
					id = fmt.Sprintf("w%d-%d", w, i)
				case 1:
					id = "shared"
				}
				req, _ := http.NewRequest("GET", e.url+"/api/v1/mth/matches/BTC_USDT/?mode="+mode, nil)
				if id != "" {
					req.Header.Set("X-Request-Id", id)
				}
				res, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				got := res.Header.Values("X-Request-Id")
				if len(got) != 1 || got[0] == "" || id != "" && got[0] != id || id == "" && !genID(got[0]) {
					t.Errorf("%s request with id %q answered %d with X-Request-Id %q", mode, id, res.StatusCode, got)
					continue
				}
				want := http.StatusOK
				switch {
				case res.StatusCode == http.StatusTooManyRequests:
					want = res.StatusCode
				case mode == "own" || mode == "two":
					want = http.StatusBadGateway
				}
				if res.StatusCode != want {
					t.Errorf("%s request %q: %d, want %d", mode, got[0], res.StatusCode, want)
				}
				// exgate's field, and the backend's own after it (one
				// list of limits, each named).
				f, n := res.Header.Values("Ratelimit"), 1
				if mode == "ratelimit" && res.StatusCode == http.StatusOK {
					n = 2
				}
				if len(f) != n || !strings.HasPrefix(f[0], `"address";r=`) || n == 2 && f[1] != `"backend";r=0;t=1` {
					t.Errorf("%s request %q: RateLimit %q, want exgate's field (and the backend's)", mode, got[0], f)
				}
				mu.Lock()
				answers = append(answers, got[0])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	checkIDsReachedAndLogged(t, e, answers)
}

// answerInEveryWay is the backend of TestHeaderValuesOfConcurrentRequests:
// it answers as the request's mode query says, echoing the request's id,
// with none, with its own, with two, after a 103 Early Hints, with
// trailers, or with rate-limit fields of its own.
func answerInEveryWay(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	switch r.URL.Query().Get("mode") {
	case "echo":
		w.Header().Set("X-Request-Id", id)
	case "own":
		w.Header().Set("X-Request-Id", "backend-own")
	case "two":
		w.Header()["X-Request-Id"] = []string{id, id}
	case "early":
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("X-Request-Id", id)
		w.WriteHeader(http.StatusEarlyHints)
	case "trailer":
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("X-Request-Id", id)
		_, _ = io.WriteString(w, `{}`)
		w.Header().Set("X-Checksum", id)
		return
	case "ratelimit":
		w.Header().Set("X-Request-Id", id)
		w.Header().Set("RateLimit-Policy", `"backend";q=1;w=1`)
		w.Header().Set("RateLimit", `"backend";r=0;t=1`)
	}
	_, _ = io.WriteString(w, `{}`)
}

// checkIDsReachedAndLogged checks that the backend got each request's id
// with a part of exgate's, and the client's address, and that the access
// log's ids, read after all the traffic, are the ids the clients were
// answered with.
func checkIDsReachedAndLogged(t *testing.T, e *env, answers []string) {
	t.Helper()
	for _, r := range e.backend.all() {
		up := r.Header.Values("X-Request-Id")
		if len(up) != 1 || strings.Count(up[0], ".") > 1 || !genID(up[0][strings.LastIndexByte(up[0], '.')+1:]) {
			t.Errorf("the backend got X-Request-Id %q", up)
		}
		if ip := r.Header.Values("X-Real-Ip"); len(ip) != 1 || ip[0] != "127.0.0.1" {
			t.Errorf("the backend got X-Real-IP %q", ip)
		}
	}
	var logged []string
	for _, l := range e.logs.FilterMessage("request").All() {
		logged = append(logged, fmt.Sprint(l.ContextMap()["request_id"]))
	}
	slices.Sort(answers)
	slices.Sort(logged)
	if !slices.Equal(answers, logged) {
		t.Errorf("the access log's request ids differ from the answers' (%d lines, %d answers)", len(logged), len(answers))
	}
}

// genID reports whether s has the form of an id exgate makes: a
// prefix, a count and a random part, base-36 digits and two dashes.
func genID(s string) bool {
	if len(s) > genIDLen || strings.Count(s, "-") != 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-') {
			return false
		}
	}
	return true
}

// TestCopyBuffersCarryOnlyTheirResponse: the reverse proxy's copy buffers
// (pooled, 2e88bd6) go from response to response; under many concurrent
// clients on kept-alive connections, each answer's body is only its own
// request's bytes, whole, in any framing (a length, chunks flushed in
// pieces), and one the backend breaks off midway ends short, never with
// another answer's bytes. Run with -race.
func TestCopyBuffersCarryOnlyTheirResponse(t *testing.T) {
	const workers, perWorker, size = 8, 40, 100_000
	e := startEnv(t, nil)
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		who := r.URL.Query().Get("who")
		body := strings.Repeat(who, size/len(who)+1)[:size]
		switch r.URL.Query().Get("mode") {
		case "length":
			w.Header().Set("Content-Length", fmt.Sprint(size))
			_, _ = io.WriteString(w, body)
		case "chunks":
			for i := 0; i < size; i += 7_000 {
				_, _ = io.WriteString(w, body[i:min(i+7_000, size)])
				w.(http.Flusher).Flush()
			}
		case "broken":
			w.Header().Set("Content-Length", fmt.Sprint(size))
			_, _ = io.WriteString(w, body[:size/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	}
	modes := []string{"length", "chunks", "broken"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for i := range perWorker {
				mode := modes[(w+i)%len(modes)]
				who := fmt.Sprintf("<w%d-%d>", w, i)
				res, err := client.Get(e.url + "/api/v1/mkt/markets/?mode=" + mode + "&who=" + who)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				want := strings.Repeat(who, size/len(who)+1)[:size]
				switch {
				case !strings.HasPrefix(want, string(b)):
					t.Errorf("%s answer of %s: %d bytes not all its own", mode, who, len(b))
				case mode != "broken" && (err != nil || len(b) != size):
					t.Errorf("%s answer of %s: %d bytes, %v; want all %d", mode, who, len(b), err, size)
				case mode == "broken" && err == nil && res.StatusCode == http.StatusOK:
					t.Errorf("broken answer of %s read whole without an error (%d bytes)", who, len(b))
				}
			}
		}()
	}
	wg.Wait()
}
