package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/exgate/exgate/config"
)

// TestAdminRefusesCrossSitePages plays, in Chromium, a page of another
// site (served from localhost: loopback, so no local-network prompt
// stands in the way, as none does in browsers without one) that an
// operator opens while the admin listener is on loopback without a token:
// the page sends the listener, by its address, a no-cors fetch of a CPU
// profile, a forced collection, a stop-the-world goroutine dump and the
// console's status. Its script cannot read the answers,
// but on main each was served, its cost paid; Chromium's network log
// shows each now answered 403 (Sec-Fetch-Site: cross-site), while the
// console's own page reads the status and pprof as before.
func TestAdminRefusesCrossSitePages(t *testing.T) {
	ctx := newBrowser(t, 3*time.Minute)
	a := startStackWith(t, func(c *config.Config) { c.Log.Access = false; c.Admin.Pprof = true }, secretEnv)
	_, port, _ := net.SplitHostPort(a.adminAd)
	admin := "http://127.0.0.1:" + port
	targets := []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/heap?gc=1", "/debug/pprof/goroutine?debug=2", "/admin/status"}
	var script strings.Builder
	for _, p := range targets {
		script.WriteString(`fetch("` + admin + p + `", {mode: "no-cors"}).catch(() => {});`)
	}
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><body><script>" + script.String() + "</script></body>"))
	}))
	t.Cleanup(attacker.Close)
	_, attackerPort, _ := net.SplitHostPort(attacker.Listener.Addr().String())

	var mu sync.Mutex
	answered := map[string]int64{} // admin path → status Chromium saw
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventResponseReceived); ok && strings.HasPrefix(e.Response.URL, admin+"/") {
			mu.Lock()
			answered[strings.TrimPrefix(e.Response.URL, admin)] = e.Response.Status
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	seen := func() map[string]int64 {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int64{}
		for k, v := range answered {
			out[k] = v
		}
		return out
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate("http://localhost:"+attackerPort+"/")); err != nil {
		t.Fatalf("browser: open the other site's page: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(seen()) < len(targets) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := seen()
	for _, p := range targets {
		if s, ok := got[p]; !ok || s != http.StatusForbidden {
			t.Errorf("the other site's request of %s: answered %d (seen %v), want 403", p, s, ok)
		}
	}

	read := `Promise.all([fetch("/admin/status"), fetch("/debug/pprof/")]).then(rs => rs.map(r => r.status).join(" "))`
	var own string
	if _, err := chromedp.Run(ctx, chromedp.Navigate(admin+"/")); err != nil {
		t.Fatalf("browser: open the console: %v", err)
	}
	if _, err := chromedp.Run(ctx, into(&own, chromedp.Evaluate[string](read, chromedp.EvalAwaitPromise))); err != nil {
		t.Fatalf("browser: read from the console's page: %v", err)
	}
	if own != "200 200" {
		t.Errorf("the console's own page read the status and pprof: %s, want 200 200", own)
	}
}
