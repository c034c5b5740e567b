package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/exgate/exgate/config"
)

// newBrowser starts a headless Chromium (Debian's chromium, which
// .ci/test-deps.sh installs) driven over the DevTools protocol with
// chromedp, in a fresh profile with no background traffic, and returns a
// browser context bounded by timeout; extra options come last.
func newBrowser(t *testing.T, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed (.ci/test-deps.sh installs it)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("HOME=" + t.TempDir()),
		chromedp.WindowSize(1366, 900),
	}
	opts = append(opts, extra...)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancelTimeout() })
	return bctx
}

// into makes an action that runs a and keeps its value in dst, so that
// one chromedp.Do can read several values.
func into[T any](dst *T, a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, t)
		*dst = v
		return chromedp.Void{}, err
	}
}

// textOf reads the text of the first element sel matches, found and read
// in one script.
func textOf(sel string) chromedp.Action[string] {
	return chromedp.Evaluate[string](`(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); return e ? e.textContent : ""; })()`)
}

// TestConsolePageInBrowser loads the console in a real browser while
// traffic runs: the operator signs in with the admin token, and the page
// shows the client driven over its limit first among the throttled, the
// store's state, and the limits a click on "inspect" reads. A screenshot
// is kept (in docs/console.png with EXGATE_UPDATE_SCREENSHOT=1).
func TestConsolePageInBrowser(t *testing.T) {
	ctx := newBrowser(t, 3*time.Minute)
	a, gw, admin := consoleStack(t, "")
	hot := a.limits.Enforcer.TokenID("hot-token")[:12]

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // traffic for as long as the page is looked at
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			get(t, gw+"/api/v1/mkt/markets/", "Authorization", "Bearer hot-token")
			get(t, gw+"/api/v1/mkt/markets/", "Authorization", "Bearer calm-"+strconv.Itoa(i%40))
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	var firstWho, store, csp, inspectRemaining, html, replica, note, refusals string
	type css = chromedp.CSS
	steps := []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the page", chromedp.Navigate(admin + "/")},
		{"the sign-in form", chromedp.WaitVisible(css("#login"))},
		{"type the token", chromedp.SendKeys(css("#token"), testAdminToken)},
		{"sign in", chromedp.Click(css("#login button"))},
		{"the form goes away", chromedp.WaitNotVisible(css("#login"))},
		{"a throttled identity appears", chromedp.Poll[chromedp.Void](`(() => { const c = document.querySelector("#top-refused tbody tr td:nth-child(3)");
			return c && c.textContent.length === 12; })()`, chromedp.WithPollingTimeout(time.Minute))},
		// The page redraws its tables as traffic goes on: a row is read
		// and clicked in one script, not found by one call and read by
		// another (the node may be gone in between).
		{"read the first and inspect it", into(&firstWho, chromedp.Evaluate[string](`(() => {
			const row = document.querySelector("#top-refused tbody tr");
			row.querySelector("button").click();
			return row.querySelector("td:nth-child(3)").textContent; })()`))},
		{"read the store", into(&store, textOf("#status dd"))},
		{"read the replica", into(&replica, textOf("#replica"))},
		{"read the window", into(&note, textOf("#top-note"))},
		{"read the refusals", into(&refusals, textOf("#refusals tbody"))},
		{"the inspection appears", chromedp.Poll[chromedp.Void](`document.querySelectorAll("#inspect-table tbody tr").length > 0`,
			chromedp.WithPollingTimeout(time.Minute))},
		{"read remaining", into(&inspectRemaining, textOf("#inspect-table tbody tr td:nth-child(6)"))},
		{"let the chart draw", chromedp.Poll[chromedp.Void](`document.querySelectorAll("#chart rect").length >= 6`, chromedp.WithPollingTimeout(time.Minute))},
		{"try an inline script", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.createElement("script");
			s.textContent = "window.inlineRan = true"; document.body.appendChild(s); })()`)},
		{"did it run", into(&csp, chromedp.Evaluate[string](`window.inlineRan ? "inline script ran" : "blocked"`))},
		{"read the page", into(&html, chromedp.OuterHTML(css("html")))},
	}
	for _, st := range steps {
		if _, err := chromedp.Run(ctx, st.a); err != nil {
			t.Fatalf("browser: %s: %v", st.name, err)
		}
	}
	if firstWho != hot {
		t.Errorf("first among the throttled: %q, want the hot token %q", firstWho, hot)
	}
	if !strings.HasPrefix(store, "memory · reachable") {
		t.Errorf("store state shown: %q", store)
	}
	if h, _ := os.Hostname(); !strings.HasPrefix(replica, "replica "+h+" · ") {
		t.Errorf("the page names the replica %q, want the host name %q (no replica set)", replica, h)
	}
	if !regexp.MustCompile(`^replica \S+, the last (6\d|70) s \(the window slides\)`).MatchString(note) {
		t.Errorf("the top lists' note: %q", note)
	}
	if refusals != "—tracing is off (tracing.exporter)" {
		t.Errorf("the refusals table with tracing off: %q, want it to say tracing is off", refusals)
	}
	if inspectRemaining != "0" {
		t.Errorf("inspect of the hot token shows remaining %q, want 0", inspectRemaining)
	}
	if csp != "blocked" {
		t.Errorf("the page's Content-Security-Policy runs inline scripts: %s", csp)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "console.png")
	if os.Getenv("EXGATE_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join("..", "..", "docs", "console.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, testAdminToken) {
		t.Error("the page shows the admin token")
	}
}

// TestConsoleRefusesDNSRebinding plays a DNS-rebinding attack in a real
// browser: a page of another site whose name now resolves to the admin
// listener (Chromium's host resolver maps rebind.test to 127.0.0.1) asks
// the listener for the console's data from its own origin. The console,
// open to whoever reaches a loopback listener without a token, refuses
// the request that names that Host; the same page by the listener's
// address reads it. So do /readyz and /metrics, which need no token
// (on main the rebound page read both: 200 200).
func TestConsoleRefusesDNSRebinding(t *testing.T) {
	ctx := newBrowser(t, 3*time.Minute, chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1"))
	a := startStackWith(t, func(c *config.Config) { c.Log.Access = false }, secretEnv)
	_, port, _ := net.SplitHostPort(a.adminAd)
	read := `fetch("/admin/status").then(async r => r.status + " " + await r.text())`
	probes := `Promise.all(["/readyz", "/metrics"].map(p => fetch(p).then(r => r.status))).then(s => s.join(" "))`
	var byAddress, rebound, probesByAddress, probesRebound string
	steps := []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the console by address", chromedp.Navigate("http://127.0.0.1:" + port + "/")},
		{"read the status", into(&byAddress, chromedp.Evaluate[string](read, chromedp.EvalAwaitPromise))},
		{"read readyz and metrics", into(&probesByAddress, chromedp.Evaluate[string](probes, chromedp.EvalAwaitPromise))},
		{"open the rebound name", chromedp.Navigate("http://rebind.test:" + port + "/")},
		{"read the status from there", into(&rebound, chromedp.Evaluate[string](read, chromedp.EvalAwaitPromise))},
		{"read readyz and metrics from there", into(&probesRebound, chromedp.Evaluate[string](probes, chromedp.EvalAwaitPromise))},
	}
	for _, st := range steps {
		if _, err := chromedp.Run(ctx, st.a); err != nil {
			t.Fatalf("browser: %s: %v", st.name, err)
		}
	}
	if !strings.HasPrefix(byAddress, "200 ") || !strings.Contains(byAddress, `"routes"`) {
		t.Errorf("the console by address: %.200s", byAddress)
	}
	if !strings.HasPrefix(rebound, "403 ") || !strings.Contains(rebound, `"code":"host_not_allowed"`) || strings.Contains(rebound, `"routes"`) {
		t.Errorf("the console from the rebound name: %.200s, want 403 host_not_allowed", rebound)
	}
	if probesByAddress != "200 200" || probesRebound != "403 403" {
		t.Errorf("readyz and metrics: %s by address (want 200 200), %s from the rebound name (want 403 403)", probesByAddress, probesRebound)
	}
}

// TestConsolePageSaysWhyItIsClosed: on an admin listener beyond loopback
// without the admin token, the page still loads and says why it shows
// nothing (the API's 403 admin_token_required), instead of drawing an
// empty console.
func TestConsolePageSaysWhyItIsClosed(t *testing.T) {
	ctx := newBrowser(t, 3*time.Minute)
	a := startStackWith(t, func(c *config.Config) { c.AdminListen = "0.0.0.0:0" }, secretEnv)
	_, port, _ := net.SplitHostPort(a.adminAd)
	var updated string
	for _, st := range []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the page", chromedp.Navigate("http://127.0.0.1:" + port + "/")},
		{"the refusal shown", chromedp.Poll[chromedp.Void](`document.getElementById("updated").textContent.startsWith("not updated")`,
			chromedp.WithPollingTimeout(time.Minute))},
		{"read it", into(&updated, chromedp.Text(chromedp.CSS("#updated")))},
	} {
		if _, err := chromedp.Run(ctx, st.a); err != nil {
			t.Fatalf("browser: %s: %v", st.name, err)
		}
	}
	if !strings.Contains(updated, "no admin token is set: set EXGATE_ADMIN_TOKEN") {
		t.Errorf("the page says %q", updated)
	}
}

// checkRefusalShown opens the console of the admin listener at admin (on
// loopback: no token needed) in Chromium and waits for its table of
// recent refusals to list the refusal of trace traceID with its status
// and code: what an operator clicks through to the tracing backend from.
// Without Chromium it says so and checks nothing (.ci/test-deps.sh
// installs it).
func checkRefusalShown(t *testing.T, admin, traceID, status, code string) {
	t.Helper()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Log("chromium not installed: the console page's refusals table is not checked")
		return
	}
	ctx := newBrowser(t, 2*time.Minute)
	var row string
	find := `[...document.querySelectorAll("#refusals tbody tr")].map(r => [...r.cells].map(c => c.textContent).join("|")).find(r => r.includes(` + strconv.Quote(traceID) + `)) || ""`
	for _, st := range []struct {
		name string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the console", chromedp.Navigate("http://" + admin + "/")},
		{"the refusal listed", chromedp.Poll[chromedp.Void](find+` !== ""`, chromedp.WithPollingTimeout(time.Minute))},
		{"read its row", into(&row, chromedp.Evaluate[string](find))},
	} {
		if _, err := chromedp.Run(ctx, st.a); err != nil {
			t.Fatalf("browser: %s: %v", st.name, err)
		}
	}
	if !strings.Contains(row, "|"+status+"|"+code+"|") || !strings.HasSuffix(row, "|"+traceID) {
		t.Errorf("the console's refusals table row %q, want status %s, code %s and trace %s", row, status, code, traceID)
	}
}
