package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/promtest"
	"github.com/exgate/exgate/internal/testdeps"
)

func scrapeAdmin(t *testing.T, admin string) string {
	t.Helper()
	res, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", res.StatusCode, b)
	}
	return string(b)
}

// sample returns the value of one series in an exposition, or "".
func sample(exposition, series string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestMetricsOfRealTraffic sends traffic through the gateway and reads
// the admin listener's /metrics: requests by route, method and code,
// rate-limit decisions, upstream errors; no label carries a token, an
// address or a raw path; promtool accepts the scrape.
func TestMetricsOfRealTraffic(t *testing.T) {
	st := startStack(t, func(c *config.Config) {
		c.Route("list_matches").Limits[0].Rate = config.Rate{N: 2, Period: time.Hour}
		c.Route("list_matches").Limits[0].Burst = 2
	})
	const token = "metrics-test-secret-token"
	for i := 0; i < 3; i++ {
		call(t, "GET", st.url+"/api/v1/mkt/markets/", "", "Authorization", "Bearer "+token)
	}
	for i := 0; i < 3; i++ {
		call(t, "GET", st.url+"/api/v1/mth/matches/BTC_USDT/", "")
	}
	call(t, "GET", st.url+"/API//v1/mth/matches/ETH_USDT", "")        // a spelling of a route: its label is the route
	call(t, "GET", st.url+"/no/such/path/0xdeadbeef/", "")            // the default route
	call(t, "POST", st.url+"/api/v1/odr/orders/", `{}`)               // 401 from exgate
	call(t, "GET", st.url+"/api/v1/mkt/%2e%2e%2fetc%2fpasswd/x/", "") // refused path

	m := scrapeAdmin(t, st.app.adminAd)
	for series, want := range map[string]string{
		`exgate_requests_total{code="200",method="GET",route="list_markets"}`:                                      "3",
		`exgate_requests_total{code="200",method="GET",route="list_matches"}`:                                      "2",
		`exgate_requests_total{code="429",method="GET",route="list_matches"}`:                                      "2",
		`exgate_requests_total{code="401",method="POST",route="place_order"}`:                                      "1",
		`exgate_ratelimit_decisions_total{decision="allowed",limit="token",route="list_markets",tier="default"}`:   "3",
		`exgate_ratelimit_decisions_total{decision="limited",limit="address",route="list_matches",tier="default"}`: "2",
		`exgate_inflight_requests`: "0",
	} {
		if got := sample(m, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
	if !regexp.MustCompile(`exgate_requests_total\{code="400",method="GET",route="default"\} 1`).MatchString(m) {
		t.Error("the refused path is not counted under route=\"default\"")
	}
	if !strings.Contains(m, `exgate_build_info{goversion="go1.`) {
		t.Error("no exgate_build_info")
	}
	// A backend instance's host:port is an operator's address, the one
	// label that may carry one (upstream_instance); no client's is.
	backends := regexp.MustCompile(`upstream_instance="[^"]*"`).ReplaceAllString(m, `upstream_instance="…"`)
	for _, secret := range []string{token, "127.0.0.1", "deadbeef", "passwd", "BTC_USDT", "/api/"} {
		if strings.Contains(backends, secret) {
			t.Errorf("the scrape contains %q: labels must not carry tokens, addresses or raw paths", secret)
		}
	}

	promtool := testdeps.Command(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(m)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsOfFeaturesOff: a gateway that validates no order exports
// neither the market catalogue's age (it would read -1 for ever and fire
// ExgateMarketCatalogueNotLoaded) nor duplicate protection's store
// metrics; one that does exports both, the store's from its first claim.
func TestMetricsOfFeaturesOff(t *testing.T) {
	off := startStack(t, func(c *config.Config) {
		c.Routes = slices.DeleteFunc(c.Routes, func(r config.Route) bool { return r.Validate == config.ValidateOrd })
	})
	m := scrapeAdmin(t, off.app.adminAd)
	for _, name := range []string{"exgate_market_catalogue_age_seconds", "exgate_idempotency_store_duration_seconds", "exgate_idempotency_store_errors_total"} {
		if strings.Contains(m, name) {
			t.Errorf("%s exported by a gateway that validates no order", name)
		}
	}

	on := startStack(t, nil)
	token := authenticate(t, on.url)
	if code, _, b := order(t, on.url, token, "metrics-1", "0.001"); code != 201 {
		t.Fatalf("order: %d %s", code, b)
	}
	m = scrapeAdmin(t, on.app.adminAd)
	if got := sample(m, `exgate_idempotency_store_duration_seconds_count{operation="claim"}`); got != "1" {
		t.Errorf("claims timed = %q, want 1", got)
	}
	if got := sample(m, `exgate_idempotency_store_errors_total{kind="timeout",operation="claim"}`); got != "0" {
		t.Errorf("claim timeouts = %q, want 0", got)
	}
	if got := sample(m, `exgate_market_catalogue_age_seconds`); got == "" || strings.HasPrefix(got, "-") {
		t.Errorf("catalogue age = %q, want a loaded catalogue's age", got)
	}
}

func TestUpstreamErrorMetrics(t *testing.T) {
	st := startStack(t, nil)
	st.backendClose()
	call(t, "GET", st.url+"/api/v1/mkt/currencies/", "")
	m := scrapeAdmin(t, st.app.adminAd)
	if got := sample(m, `exgate_upstream_errors_total{kind="unreachable",route="list_currencies"}`); got != "1" {
		t.Errorf("upstream errors (unreachable) = %q, want 1", got)
	}
	// Nothing reached a backend: 503 upstream_unavailable.
	if got := sample(m, `exgate_requests_total{code="503",method="GET",route="list_currencies"}`); got != "1" {
		t.Errorf("503s = %q, want 1", got)
	}
}

// TestPrometheusScrapesExgate runs a real Prometheus server scraping
// exgate's admin listener and reads exgate_requests_total back through
// Prometheus's HTTP API.
func TestPrometheusScrapesExgate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	bin := testdeps.Command(t, "prometheus", "prometheus")
	st := startStack(t, nil)
	for i := 0; i < 4; i++ {
		call(t, "GET", st.url+"/api/v1/mkt/currencies/", "")
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, scrape_timeout: 900ms}\nscrape_configs:\n  - job_name: exgate\n    static_configs: [{targets: [%q]}]\n", st.app.adminAd)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := promtest.Start(t, bin, cfgPath)
	q := "http://" + addr + "/api/v1/query?query=" +
		url.QueryEscape(`exgate_requests_total{job="exgate",route="list_currencies",method="GET",code="200"}`)
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		res, err := http.Get(q)
		if err != nil {
			last = err.Error()
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		last = string(b)
		var ans struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.Unmarshal(b, &ans) == nil && len(ans.Data.Result) == 1 && ans.Data.Result[0].Value[1] == "4" {
			return
		}
	}
	t.Fatalf("Prometheus never read exgate_requests_total = 4 from exgate; last answer %s", last)
}
