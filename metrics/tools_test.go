package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exgate/exgate/internal/promtest"
	"github.com/exgate/exgate/internal/testdeps"
)

// serveMetrics serves Handler(reg) on a real loopback socket and returns
// its URL.
func serveMetrics(t *testing.T) (*Metrics, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, BuildInfo{Version: "v0.0.0-test", Revision: "0123456789ab"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterCatalogueAge(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(reg))
	t.Cleanup(srv.Close)
	return m, srv.URL + "/metrics"
}

func scrape(t *testing.T, u string) []byte {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", u, res.Status, body)
	}
	return body
}

// TestPromtoolCheckMetrics pipes a real scrape into `promtool check
// metrics`, which parses the exposition and lints every family.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := testdeps.Command(t, "promtool", "prometheus")
	m, u := serveMetrics(t)
	exercise(m)
	m.Route("list_matches").ObserveRequest("GET", 418, time.Second)
	body := scrape(t, u)
	for _, name := range Names() {
		if !bytes.Contains(body, []byte("\n# TYPE "+name+" ")) {
			t.Errorf("scrape lacks family %s", name)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}

	// The check is not vacuous: promtool refuses a broken counter.
	cmd = exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader("# HELP exgate_bad_seconds x\n# TYPE exgate_bad_seconds counter\nexgate_bad_seconds 1\n")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("promtool accepted a counter without _total:\n%s", out)
	}
}

// TestPrometheusScrapes runs a real Prometheus server that scrapes a
// metrics handler on loopback, then reads exgate_requests_total back
// through Prometheus's HTTP API.
func TestPrometheusScrapes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	bin := testdeps.Command(t, "prometheus", "prometheus")
	m, u := serveMetrics(t)
	r := m.Route("place_order")
	for range 7 {
		r.ObserveRequest("POST", 201, 2*time.Millisecond)
	}
	target, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: exgate
    static_configs:
      - targets: [%q]
`, target.Host)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := promtest.Start(t, bin, cfgPath)

	query := "http://" + addr + "/api/v1/query?query=" +
		url.QueryEscape(`exgate_requests_total{job="exgate",route="place_order",method="POST",code="201"}`)
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		v, body, err := queryValue(query)
		if err != nil {
			last = err.Error()
			continue
		}
		last = body
		if v == "7" {
			return
		}
	}
	t.Fatalf("Prometheus never returned exgate_requests_total = 7; last answer: %s", last)
}

// queryValue runs an instant query and returns the first sample's value.
func queryValue(u string) (value, body string, err error) {
	res, err := http.Get(u)
	if err != nil {
		return "", "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", "", err
	}
	var ans struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return "", string(b), err
	}
	if ans.Status != "success" || len(ans.Data.Result) == 0 {
		return "", string(b), nil
	}
	v, _ := ans.Data.Result[0].Value[1].(string)
	return v, string(b), nil
}
