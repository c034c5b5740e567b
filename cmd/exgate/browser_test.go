package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// browserPage is a trading page on another origin: it places orders
// through exgate with fetch (each a preflighted cross-origin request)
// and writes what it could read into the DOM as JSON.
const browserPage = `<!doctype html><html><body><pre id="out">pending</pre><script>
const gw = "GATEWAY";
const out = {};
async function answer(r) {
  let body = null;
  try { body = await r.json(); } catch (e) {}
  return {status: r.status, body: body, ratelimit: r.headers.get("RateLimit"),
          retryAfter: r.headers.get("Retry-After"), requestId: r.headers.get("X-Request-ID")};
}
async function run() {
  const json = {"Content-Type": "application/json"};
  out.noToken = await answer(await fetch(gw + "/api/v1/odr/orders/", {method: "POST", headers: json, body: "{}"}));
  const auth = await (await fetch(gw + "/api/v1/usr/authenticate/", {method: "POST", headers: json,
      body: JSON.stringify({api_key: "dev", secret_key: "dev"})})).json();
  const h = {"Content-Type": "application/json", "Authorization": "Bearer " + auth.access};
  const order = JSON.stringify({symbol: "BTC_USDT", type: "limit", side: "buy", price: "60000", base_amount: "0.001"});
  out.orders = [];
  for (let i = 0; i < 3; i++) {
    out.orders.push(await answer(await fetch(gw + "/api/v1/odr/orders/", {method: "POST", headers: h, body: order})));
  }
  out.invalid = await answer(await fetch(gw + "/api/v1/odr/orders/bulk/", {method: "POST", headers: h,
      body: JSON.stringify([{symbol: "BTC_USDT", type: "limit", side: "buy", price: "1.001", base_amount: "0.001"}])}));
  const open = await (await fetch(gw + "/api/v1/odr/orders/?state=active", {headers: h})).json();
  out.cancel = await answer(await fetch(gw + "/api/v1/odr/orders/" + open[0].id + "/", {method: "DELETE", headers: h}));
}
run().catch(e => { out.error = String(e); }).finally(() => {
  document.getElementById("out").textContent = JSON.stringify(out);
});
</script></body></html>`

// TestBrowserOnAnotherOrigin drives a real headless Chromium: a page
// served from one origin trades through exgate on another, with the cors
// policy on. Its preflights are answered by exgate (none reaches the
// backend), and the page can read exgate's refusals — 401, 429 with
// Retry-After, 400 naming the field — and the rate-limit headers.
func TestBrowserOnAnotherOrigin(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed (.ci/test-deps.sh installs it)")
	}
	var gateway atomic.Value // the gateway's URL, known once the stack runs
	gateway.Store("")
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(strings.Replace(browserPage, "GATEWAY", gateway.Load().(string), 1)))
	}))
	defer page.Close()
	st := startStack(t, func(c *config.Config) {
		c.CORS.AllowedOrigins = []string{page.URL}
		c.Route("place_order").Limits[0].Rate = config.Rate{N: 2, Period: time.Hour}
		c.Route("place_order").Limits[0].Burst = 2
	})
	gateway.Store(st.url)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=20000", "--dump-dom", page.URL+"/")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, dom)
	}
	m := regexp.MustCompile(`(?s)<pre id="out">(.*?)</pre>`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no result in the page:\n%s", dom)
	}
	text := strings.NewReplacer("&quot;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(string(m[1]))
	type answer struct {
		Status     int
		Body       map[string]any
		RateLimit  string `json:"ratelimit"`
		RetryAfter string `json:"retryAfter"`
		RequestID  string `json:"requestId"`
	}
	var got struct {
		Error   string
		NoToken answer
		Orders  []answer
		Invalid answer
		Cancel  answer
	}
	if err := json.Unmarshal([]byte(text), &got); err != nil || got.Error != "" {
		t.Fatalf("page result %q: %v", text, err)
	}
	if got.NoToken.Status != 401 || got.NoToken.Body["code"] != "not_authenticated" || got.NoToken.RequestID == "" {
		t.Errorf("the page cannot read exgate's 401: %+v", got.NoToken)
	}
	if len(got.Orders) != 3 || got.Orders[0].Status != 201 || !strings.Contains(got.Orders[1].RateLimit, "r=0") {
		t.Errorf("orders: %+v", got.Orders)
	} else if o := got.Orders[2]; o.Status != 429 || o.Body["code"] != "throttled" || o.RetryAfter == "" {
		t.Errorf("the page cannot read the 429: %+v", o)
	}
	if got.Invalid.Status != 400 || !strings.Contains(got.Invalid.Body["detail"].(string), "orders[0].price") {
		t.Errorf("the page cannot read the invalid bulk: %+v", got.Invalid)
	}
	if got.Cancel.Status != 200 || got.Cancel.Body["state"] != "canceled" {
		t.Errorf("cancel through the page: %+v", got.Cancel)
	}
	if n := st.backend.options.Load(); n != 0 {
		t.Errorf("%d preflights reached the backend; the policy answers them", n)
	}
}
