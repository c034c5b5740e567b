package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// tokenRecorder is a backend that records the bearer token of every
// request it answers.
type tokenRecorder struct {
	mu     sync.Mutex
	tokens []string
}

func (b *tokenRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.tokens = append(b.tokens, r.Header.Get("Authorization"))
	b.mu.Unlock()
	w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
	_, _ = w.Write([]byte(`{}`))
}

func (b *tokenRecorder) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.tokens...)
}

// TestRouteSplit runs a route split 3:1 between the default service and
// a canary, each a backend of its own: the counts follow the weights
// (generous bounds), and with sticky: account every token's requests go
// to one service while both services get accounts.
func TestRouteSplit(t *testing.T) {
	stable, canary := &tokenRecorder{}, &tokenRecorder{}
	sa, sb := httptest.NewServer(stable), httptest.NewServer(canary)
	t.Cleanup(sa.Close)
	t.Cleanup(sb.Close)
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
server: {drain_delay: 0s}
upstream:
  url: %s
  services:
    canary: {urls: [%s]}
routes:
  - {name: sticky, match: "GET /sticky/", auth: required, split: [{service: default, weight: 1}, {service: canary, weight: 1}], sticky: account}
  - {name: drawn, match: "*", auth: none, split: [{service: default, weight: 3}, {service: canary, weight: 1}]}
`, sa.URL, sb.URL)
	cfg, err := config.Parse("exgate.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	base := "http://" + a.addr

	const n = 800
	for range n {
		if code, _, body := call(t, "GET", base+"/x", ""); code != 200 {
			t.Fatalf("GET /x: %d %s", code, body)
		}
	}
	// 600 and 200 expected; a binomial's standard deviation is 12 here.
	if s, c := len(stable.seen()), len(canary.seen()); s < 500 || s > 700 || s+c != n {
		t.Errorf("3:1 split of %d requests: %d to the default service, %d to the canary", n, s, c)
	}

	const accounts = 40
	for i := range accounts {
		for range 4 {
			if code, _, body := call(t, "GET", base+"/sticky/", "", "Authorization", fmt.Sprintf("Bearer account-%d", i)); code != 200 {
				t.Fatalf("GET /sticky/: %d %s", code, body)
			}
		}
	}
	where := map[string]map[string]int{}
	for name, b := range map[string]*tokenRecorder{"default": stable, "canary": canary} {
		for _, tok := range b.seen() {
			if tok == "" {
				continue
			}
			if where[tok] == nil {
				where[tok] = map[string]int{}
			}
			where[tok][name]++
		}
	}
	services := map[string]int{}
	for tok, by := range where {
		if len(by) != 1 {
			t.Errorf("%s went to more than one service: %v", tok, by)
		}
		for name := range by {
			services[name]++
		}
	}
	if len(where) != accounts || services["default"] == 0 || services["canary"] == 0 {
		t.Errorf("%d accounts seen, by service %v; want %d spread over both", len(where), services, accounts)
	}
}
