package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/testdeps"
	"github.com/exgate/exgate/validate"
)

// drfBackend is the Django REST framework backend of testdata/drf: an
// order view with SimpleJWT authentication and a DecimalField serializer,
// run by Debian's python3 on a free loopback port.
type drfBackend struct {
	url    string
	tokens []string // access tokens of users 1, 2 and 2 again
}

// drfPython returns a python3 that imports Django REST framework and
// SimpleJWT (Debian's python3-djangorestframework and
// python3-djangorestframework-simplejwt, installed by .ci/test-deps.sh).
// Outside CI the test is skipped when there is none; in CI it fails.
func drfPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", "import django, rest_framework, rest_framework_simplejwt").Run() == nil {
			return path
		}
	}
	msg := "no python3 that imports django, rest_framework and rest_framework_simplejwt " +
		"(apt-get install python3-djangorestframework python3-djangorestframework-simplejwt, or make test-deps)"
	testdeps.Missing(t, msg)
	return ""
}

// startDRF runs testdata/drf/serve.py until the test ends.
func startDRF(t *testing.T) *drfBackend {
	t.Helper()
	py := drfPython(t)
	dir, err := filepath.Abs(filepath.Join("testdata", "drf"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "serve.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("DRF backend stderr:\n%s", stderr.String())
		}
	})
	type ready struct {
		b   *drfBackend
		err error
	}
	done := make(chan ready, 1)
	go func() {
		b := &drfBackend{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "TOKEN":
				b.tokens = append(b.tokens, f[1])
			case len(f) == 2 && f[0] == "LISTENING":
				b.url = "http://127.0.0.1:" + f[1]
				done <- ready{b: b}
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		done <- ready{err: fmt.Errorf("serve.py ended before listening: %v", sc.Err())}
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.b.tokens) != 3 {
			t.Fatalf("DRF backend: %v (tokens %d); stderr:\n%s", r.err, len(r.b.tokens), stderr.String())
		}
		return r.b
	case <-time.After(30 * time.Second):
		t.Fatalf("DRF backend did not start within 30s; stderr:\n%s", stderr.String())
	}
	return nil
}

// placement is one order the DRF view placed, as it recorded it.
type placement struct {
	ID          int                `json:"id"`
	User        string             `json:"user"`
	RequestID   string             `json:"request_id"`
	ContentType string             `json:"content_type"`
	Body        string             `json:"body"`
	Fields      map[string]*string `json:"fields"`
}

func (b *drfBackend) placed(t *testing.T) []placement {
	t.Helper()
	var ps []placement
	b.read(t, "/test/placed/", &ps)
	for i := range ps {
		ps[i].RequestID = clientRequestID(ps[i].RequestID)
	}
	return ps
}

// read decodes what the DRF backend's test endpoint at path returns into
// v.
func (b *drfBackend) read(t *testing.T, path string, v any) {
	t.Helper()
	res, err := http.Get(b.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// clientRequestID is the client's X-Request-ID of a request the backend
// received: exgate sends it with a part of its own after a last dot (no
// two requests in flight share one).
func clientRequestID(id string) string {
	if j := strings.LastIndexByte(id, '.'); j >= 0 {
		return id[:j]
	}
	return id
}

// drfCase is one request of the differential test.
type drfCase struct {
	name        string
	contentType string
	body        string
	auth        string // the Authorization header; "" means "Bearer <token of user 1>"
	mustPlace   bool   // the backend must place it (a token spelling both read alike)
}

// parserEdgeCases are bodies and headers that JSON parsers and media-type
// parsers read differently: escapes, byte-order marks, charsets and RFC
// 2231 parameters, big and exotic numbers, duplicate and escaped keys,
// nesting.
func parserEdgeCases() []drfCase {
	const o = `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.0015"`
	js := "application/json"
	deep := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	cs := []drfCase{
		// Numbers a float cannot hold, exponents, signs.
		{"price 99999999999999999.99 as a number", js, `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":99999999999999999.99,"base_amount":"0.000001","identifier":"big-number"}`, "", false},
		{"price 99999999999999999.99 as a string", js, `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"99999999999999999.99","base_amount":"0.000002"}`, "", false},
		{"20-digit amount as a number", js, `{"symbol":"USDT_IRT","type":"limit","side":"sell","price":1,"base_amount":99999999999999999999}`, "", false},
		{"20 digits and 2 places", js, `{"symbol":"USDT_IRT","type":"limit","side":"sell","price":1,"base_amount":99999999999999999999.99}`, "", false},
		{"21 digits", js, `{"symbol":"USDT_IRT","type":"limit","side":"sell","price":1,"base_amount":123456789012345678901}`, "", false},
		{"1e2", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":1e2}`, "", false},
		{"1E+2 string", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":"1E+2"}`, "", false},
		{"0.1e3", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":0.1e3}`, "", false},
		{"100.000000", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":"100.000000"}`, "", false},
		{"1e-7 on 8 places", js, `{"symbol":"BTC_IRT","type":"limit","side":"buy","price":6e9,"base_amount":1e-7}`, "", false},
		{"1e20", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":1e20}`, "", false},
		{"1e400", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":1e400}`, "", false},
		{"1e-400", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":"1e-400"}`, "", false},
		{"-0", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":-0}`, "", false},
		{"NaN string", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":"NaN"}`, "", false},
		{"Infinity bare", js, `{"symbol":"USDT_IRT","type":"market","side":"buy","base_amount":Infinity}`, "", false},
		{"30 places", js, `{"symbol":"ETH_BTC","type":"market","side":"buy","base_amount":"1.000000000000000000000000000000"}`, "", false},
		{"trailing space in a decimal", js, o[:len(o)-len(`"0.0015"`)] + `"0.0015 "}`, "", false},
		{"non-ASCII digits", js, o[:len(o)-len(`"0.0015"`)] + `"０.0015"}`, "", false},
		// Escapes and keys.
		{"escaped key", js, `{"symbol":"BTC_USDT","type":"stop_limit","side":"sell","price":"64000.00","st\u006fp_price":"64100.00","base_amount":"0.01"}`, "", false},
		{"escaped values", js, `{"symbol":"BTC\u005FUSDT","type":"l\u0069mit","side":"b\u0075y","price":"6500\u0030.00","base_amount":"0.0015","identifier":"\u0065sc-1"}`, "", false},
		{"duplicate key", js, o + `,"price":"1.00"}`, "", false},
		{"duplicate key, once escaped", js, o + `,"pr\u0069ce":"1.00"}`, "", false},
		{"duplicate identifier key", js, o + `,"identifier":"dup-a","identifier":"dup-b"}`, "", false},
		{"stop_price under an escaped key, stop_limit", js, `{"symbol":"BTC_USDT","type":"stop_limit","side":"sell","price":"64000.00","stop\u005fprice":"64100.00","base_amount":"0.01"}`, "", false},
		{"backslash key", js, `{"symbol":"BTC_USDT","type":"stop_limit","side":"sell","price":"64000.00","stop\\price":"64100.00","base_amount":"0.01"}`, "", false},
		{"NUL in a key", js, o + `,"price\u0000":"1.00"}`, "", false},
		{"unpaired surrogate", js, o + `,"identifier":"\ud800"}`, "", false},
		{"non-ASCII identifier", js, o + `,"identifier":"ordé"}`, "", false},
		{"fullwidth symbol", js, `{"symbol":"BTC＿USDT","type":"market","side":"buy","base_amount":"0.5"}`, "", false},
		{"upper-case type", js, `{"symbol":"BTC_USDT","type":"LIMIT","side":"buy","price":"65000.00","base_amount":"0.0015"}`, "", false},
		{"identifier with spaces", js, o + `,"identifier":" pad "}`, "", false},
		{"identifier null", js, o + `,"identifier":null}`, "", false},
		{"unknown field", js, o + `,"client_note":"x"}`, "", false},
		{"nested unknown field", js, o + `,"x":{"a":[1,{"b":2}]}}`, "", false},
		{"nesting 40 deep", js, o + `,"x":` + deep + `}`, "", false},
		{"two objects", js, o + `}{}`, "", false},
		{"array", js, `[` + o + `}]`, "", false},
		{"comment", js, o + `/* x */}`, "", false},
		{"trailing comma", js, o + `,}`, "", false},
		// Byte-order marks and encodings.
		{"UTF-8 BOM", js, "\ufeff" + o + `}`, "", false},
		{"UTF-16LE body", "application/json; charset=utf-16", "\xff\xfe{\x00}\x00", "", false},
		{"invalid UTF-8 in a string", js, o + `,"identifier":"a` + "\xff" + `"}`, "", false},
		{"overlong UTF-8 quote", js, o + `,"identifier":"a` + "\xc0\xa2" + `"}`, "", false},
	}
	// Content-Type spellings: the allowed ones place the order, the rest
	// are refused before the body is read.
	for i, ct := range []string{
		"application/json; charset=utf-8", "Application/JSON;charset=UTF-8", `application/json; charset="utf-8"`, "application/json;",
		"application/json; charset*=idna", "application/json; charset*=utf-8''", "application/json; charset*=shift_jis_2004''x",
		"application/json; charset=shift_jis_2004", "application/json; charset=idna", "application/json; charset=latin1",
		"application/json; charset=utf8", "application/json; charset=utf-8; charset=idna", "application/json; charset*0=utf; charset*1=-8",
		"application/json; version=2", "application/json; charset = utf-8", "text/plain", "application/x-www-form-urlencoded",
		"", "application/json, application/json",
	} {
		cs = append(cs, drfCase{"content type " + ct, ct, fmt.Sprintf(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"ct-%d"}`, i), "", false})
	}
	// The punycode case of issue 21: four spellings that idna reads as one.
	for _, id := range []string{"xn--ls8h", "XN--LS8H", "xn--LS8h", "Xn--ls8h"} {
		cs = append(cs, drfCase{"idna spelling " + id, "application/json; charset*=idna",
			`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"` + id + `"}`, "", false})
	}
	// A stop_limit order without stop_price once shift_jis turns \ into ¥.
	cs = append(cs, drfCase{"shift_jis escaped key", "application/json; charset=shift_jis_2004",
		`{"symbol":"BTC_USDT","type":"stop_limit","side":"sell","price":"64000.00","stop\u005fprice":"64100.00","base_amount":"0.01"}`, "", false})
	return cs
}

// tokenSpellingCases sends one order (identifier spell-1) and a second
// (spell-2) under spellings of user 2's tokens: scheme case, padding,
// unused bits set, the standard base64 alphabet. Whatever exgate accepts
// must be one identity: each identifier is placed once.
func tokenSpellingCases(tokens ...string) []drfCase {
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var spellings []string
	var good []bool // spellings that are the token (scheme case, trailing white space)
	for _, tok := range tokens {
		last := strings.IndexByte(alpha, tok[len(tok)-1])
		bits := tok[:len(tok)-1] + string(alpha[last^1]) // an unused bit of the signature set
		std := strings.NewReplacer("-", "+", "_", "/").Replace(tok)
		spellings = append(spellings,
			"Bearer "+tok, "bearer "+tok, "BEARER "+tok, "bEaReR "+tok,
			"Bearer "+tok+"=", "Bearer "+tok+"==", "Bearer "+bits, "Bearer "+std,
			"Bearer  "+tok, "Bearer\t"+tok, "Token "+tok, "Bearer "+tok+" ")
		// The standard alphabet spells a different token only when the
		// token holds "-" or "_".
		good = append(good, true, true, true, true, false, false, false, std == tok, false, false, false, true)
	}
	var cs []drfCase
	// Each spelling on an identifier of its own: those that are the token
	// must be placed (exgate forwards "Bearer <token>", which SimpleJWT
	// reads), the rest refused by exgate.
	for i, auth := range spellings {
		cs = append(cs, drfCase{fmt.Sprintf("token spelling %d alone", i), "application/json",
			fmt.Sprintf(`{"symbol":"ETH_USDT","type":"market","side":"sell","base_amount":"1","identifier":"scheme-%d"}`, i), auth, good[i]})
	}
	// Every spelling on shared identifiers: placed once.
	for _, id := range []string{"spell-1", "spell-2"} {
		for i, auth := range spellings {
			cs = append(cs, drfCase{fmt.Sprintf("token spelling %d %s", i, id), "application/json",
				`{"symbol":"ETH_USDT","type":"market","side":"buy","base_amount":"1","identifier":"` + id + `"}`, auth, false})
		}
	}
	return cs
}

// validationCorpus reads validate/testdata/orders.jsonl, the validator's
// edge-case table.
func validationCorpus(t *testing.T) []drfCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "validate", "testdata", "orders.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []drfCase
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var c struct{ Name, Body string }
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, drfCase{"corpus " + c.Name, "application/json", c.Body, "", false})
	}
	return cs
}

// drfSigningKey is SIMPLE_JWT's SIGNING_KEY in testdata/drf.
const drfSigningKey = "exgate-drf-differential-test-signing-key-0123456789"

// TestDifferentialDRF puts exgate in front of a real Django REST framework
// + SimpleJWT order view and sends the validation corpus, the parser-edge
// corpus and token spellings through it. Every order the DRF view placed
// must be, field by field, the order exgate validated (the test's own
// Validator, over the catalogue DRF serves, says what that is), the body
// it received must be that order's canonical encoding, an order exgate
// refused must never arrive, and no (user, identifier) may be placed
// twice: with tokens as identities (one token, any spelling), and with
// identity.verify on, where two tokens of one user are one account.
func TestDifferentialDRF(t *testing.T) {
	t.Run("token identity", func(t *testing.T) { differentialDRF(t, false) })
	t.Run("verified accounts", func(t *testing.T) { differentialDRF(t, true) })
}

// drfGateway starts exgate, with its default configuration changed by
// mut, in front of the DRF backend, and returns its base URL and
// configuration.
func drfGateway(t *testing.T, drf *drfBackend, mut func(*config.Config)) (string, *config.Config) {
	t.Helper()
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(drf.url)
	cfg.Server.DrainDelay = 0
	cfg.Limiter.Store = config.StoreMemory
	if mut != nil {
		mut(cfg)
	}
	env := map[string]string{"EXGATE_JWT_SECRET": drfSigningKey}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: getenv})
	waitCatalogue(t, a)
	return "http://" + a.addr, cfg
}

// drfReference is the test's own Validator of cfg over the catalogue the
// DRF backend serves: what exgate validates, to compare with what DRF
// read.
func drfReference(t *testing.T, cfg *config.Config) *validate.Validator {
	t.Helper()
	cat, err := validate.NewCatalogue(validate.CatalogueOptions{BaseURL: cfg.Upstream.URL.URL,
		Path: cfg.Validation.Catalogue.Path, Transport: http.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cat.Load(ctx); err != nil {
		t.Fatal(err)
	}
	ref, err := validate.New(cfg.Validation, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func differentialDRF(t *testing.T, verify bool) {
	drf := startDRF(t)
	gw, cfg := drfGateway(t, drf, func(c *config.Config) { c.Identity.Verify = verify })
	ref := drfReference(t, cfg)

	cases := append(validationCorpus(t), parserEdgeCases()...)
	spelled := drf.tokens[1:2]
	if verify {
		spelled = drf.tokens[1:] // two tokens of user 2: one account
	}
	cases = append(cases, tokenSpellingCases(spelled...)...)
	byID := sendDRFCases(t, drf, gw, ref, cases)
	placed := drf.placed(t)
	seen, arrived := checkDRFPlaced(t, placed, byID)
	accepted, refused := 0, 0
	for id, s := range byID {
		if s.c.mustPlace && !arrived[id] {
			t.Errorf("%s: not placed (%d %s): exgate and the backend read this token differently", s.c.name, s.status, s.body)
		}
		if !s.c.mustPlace && strings.HasSuffix(s.c.name, " alone") && arrived[id] {
			t.Errorf("%s: placed under a token spelling exgate must refuse", s.c.name)
		}
		switch {
		case arrived[id]:
			accepted++
			if s.status != http.StatusCreated {
				t.Errorf("%s: placed, but the client got %d %s", s.c.name, s.status, s.body)
			}
		case s.canon != "" && s.status == http.StatusCreated:
			// A replay of an identifier already placed: the first answer.
		case s.canon != "" && s.status == http.StatusConflict:
			// The identifier was placed with another order.
		case s.canon != "" && s.c.auth != "" && s.status == http.StatusUnauthorized:
			// A token spelling exgate refuses.
		case s.canon != "":
			t.Errorf("%s: exgate's validator accepts it, yet it was not placed: %d %s", s.c.name, s.status, s.body)
		default:
			refused++
			if s.status < 400 || s.status >= 500 || !bytes.Contains(s.body, []byte(`"code"`)) {
				t.Errorf("%s: refused order answered %d %s, want exgate's 4xx error", s.c.name, s.status, s.body)
			}
		}
	}
	t.Logf("%d requests: %d placed, %d refused by exgate", len(cases), accepted, refused)
	if accepted < 40 || refused < 100 {
		t.Errorf("only %d placed and %d refused: the corpus did not run", accepted, refused)
	}

	// The number a float would have rounded to 1E+17 was placed exactly.
	found := false
	for _, p := range placed {
		if id := p.Fields["identifier"]; id != nil && *id == "big-number" {
			found = true
			switch pr := p.Fields["price"]; {
			case pr == nil:
				t.Error("price 99999999999999999.99 placed without a price")
			case !mustDecimal(t, *pr).Equal(decimal.RequireFromString("99999999999999999.99")):
				t.Errorf("price 99999999999999999.99 placed as %s", *pr)
			}
		}
	}
	if !found {
		t.Error("the 99999999999999999.99 order was not placed")
	}
	// Token spellings: the accepted ones are one identity.
	for _, id := range []string{"spell-1", "spell-2"} {
		if _, ok := seen[[2]string{"2", id}]; !ok {
			t.Errorf("%s was never placed for user 2", id)
		}
	}
}

// drfCaseSent is an order differentialDRF sent through exgate, and
// exgate's answer.
type drfCaseSent struct {
	c      drfCase
	canon  string // the canonical encoding of the order exgate validated, or ""
	status int
	body   []byte
}

// sendDRFCases places each of cases through the gateway at gw, as DRF's
// first token unless the case gives its own authorization, and returns
// them by request id with what ref, exgate's validator, made of them and
// what the client got.
func sendDRFCases(t *testing.T, drf *drfBackend, gw string, ref *validate.Validator, cases []drfCase) map[string]*drfCaseSent {
	t.Helper()
	byID := map[string]*drfCaseSent{}
	client := &http.Client{Timeout: 10 * time.Second}
	for i, c := range cases {
		s := &drfCaseSent{c: c}
		id := fmt.Sprintf("drf-case-%d", i)
		byID[id] = s
		var ct []string
		if c.contentType != "" {
			ct = strings.Split(c.contentType, ", ") // "a, b" is two header lines
		}
		if o, p := ref.Check(ct, []byte(c.body)); p == nil {
			s.canon = string(o.AppendCanonical(nil))
		}
		req, err := http.NewRequest("POST", gw+"/api/v1/odr/orders/", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Content-Type"] = ct
		req.Header["X-Request-Id"] = []string{id}
		req.Header["Authorization"] = []string{"Bearer " + drf.tokens[0]}
		if c.auth != "" {
			req.Header["Authorization"] = []string{c.auth}
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		s.status = res.StatusCode
		s.body, _ = io.ReadAll(res.Body)
		res.Body.Close()
	}
	return byID
}

// checkDRFPlaced checks every order DRF placed: sent by the test, accepted
// by exgate's validator, received in its canonical form, and its
// identifier placed once per user. It returns the placed identifiers,
// (user, identifier) → request id, and the request ids that arrived.
func checkDRFPlaced(t *testing.T, placed []placement, byID map[string]*drfCaseSent) (seen map[[2]string]string, arrived map[string]bool) {
	t.Helper()
	seen, arrived = map[[2]string]string{}, map[string]bool{}
	for _, p := range placed {
		s := byID[p.RequestID]
		if s == nil {
			t.Errorf("DRF placed an order from an unknown request %q: %s", p.RequestID, p.Body)
			continue
		}
		arrived[p.RequestID] = true
		name := s.c.name
		if s.canon == "" {
			t.Errorf("%s: DRF placed %s, an order exgate's validator refuses", name, p.Body)
			continue
		}
		if p.Body != s.canon {
			t.Errorf("%s: DRF received %q, want the canonical %q", name, p.Body, s.canon)
		}
		if p.ContentType != "application/json" {
			t.Errorf("%s: DRF received Content-Type %q", name, p.ContentType)
		}
		sameOrder(t, name, s.canon, p.Fields)
		if id := p.Fields["identifier"]; id != nil {
			k := [2]string{p.User, *id}
			if prev, dup := seen[k]; dup {
				t.Errorf("%s: identifier %q of user %s placed twice (first by %s)", name, *id, p.User, prev)
			}
			seen[k] = p.RequestID
		}
	}
	return seen, arrived
}

// sameOrder asserts that the fields the DRF serializer validated equal
// the order exgate validated (its canonical encoding), field by field:
// strings equal, decimals equal as exact decimals, absent and null alike.
func sameOrder(t *testing.T, name, canon string, got map[string]*string) {
	t.Helper()
	var want map[string]string
	if err := json.Unmarshal([]byte(canon), &want); err != nil {
		t.Fatalf("%s: canonical %s: %v", name, canon, err)
	}
	for _, k := range []string{"symbol", "type", "side", "base_amount", "quote_amount", "price", "stop_price", "oco_target_price", "identifier"} {
		w, has := want[k]
		g := got[k]
		switch {
		case !has && g != nil:
			t.Errorf("%s: DRF read %s=%q, exgate validated no %s", name, k, *g, k)
		case !has:
		case g == nil:
			t.Errorf("%s: DRF read no %s, exgate validated %q", name, k, w)
		case strings.HasSuffix(k, "amount") || strings.HasSuffix(k, "price"):
			if !mustDecimal(t, *g).Equal(mustDecimal(t, w)) {
				t.Errorf("%s: DRF read %s=%s, exgate validated %s", name, k, *g, w)
			}
		case *g != w:
			t.Errorf("%s: DRF read %s=%q, exgate validated %q", name, k, *g, w)
		}
	}
}

func mustDecimal(t *testing.T, s string) decimal.Decimal {
	t.Helper()
	d, err := decimal.NewFromString(s)
	if err != nil {
		t.Fatalf("decimal %q: %v", s, err)
	}
	return d
}

// TestDRFFormatSuffixes: a real Django REST framework backend with
// format_suffix_patterns places an order posted to "orders.json" (so the
// suffix is a way to reach the order view), and through exgate every
// suffix spelling meets place_order's guards: refused without a token
// (DRF places nothing), validated with one, and forwarded as the bare
// path with the canonical order.
func TestDRFFormatSuffixes(t *testing.T) {
	drf := startDRF(t)
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	bearer := "Bearer " + drf.tokens[0]
	code, _, b := call(t, "POST", drf.url+"/api/v1/odr/orders.json", order, "Authorization", bearer, "Content-Type", "application/json")
	if code != 201 || len(drf.placed(t)) != 1 {
		t.Fatalf("DRF itself does not place an order posted to orders.json (%d %s): the test proves nothing", code, b)
	}
	gw, _ := drfGateway(t, drf, nil)
	spellings := []string{"/api/v1/odr/orders.json", "/api/v1/odr/orders.json/", "/api/v1/odr/orders.api",
		"/api/v1/odr/ORDERS.JSON", "/api/v1/odr/orders%2ejson", "/api/v1/odr/orders.x.json"}
	for _, sp := range spellings {
		code, _, b := call(t, "POST", gw+sp, order, "Content-Type", "application/json")
		if code != 401 {
			t.Errorf("%s without a token: %d %s", sp, code, b)
		}
		bad := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","price":"1"}`
		if code, _, b := call(t, "POST", gw+sp, bad, "Authorization", bearer, "Content-Type", "application/json"); code != 400 {
			t.Errorf("%s with an order DRF would place but exgate refuses: %d %s", sp, code, b)
		}
	}
	if n := len(drf.placed(t)); n != 1 {
		t.Fatalf("DRF placed %d orders through suffix spellings exgate had to refuse", n-1)
	}
	for i, sp := range spellings {
		body := fmt.Sprintf(`{"identifier":"sfx-%d","base_amount":1e-3,"side":"buy","symbol":"BTC_USDT","type":"market"}`, i)
		if code, _, b := call(t, "POST", gw+sp, body, "Authorization", bearer, "Content-Type", "application/json"); code != 201 {
			t.Fatalf("%s with a token and a valid order: %d %s", sp, code, b)
		}
		p := drf.placed(t)
		want := fmt.Sprintf(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"sfx-%d"}`, i)
		if last := p[len(p)-1]; last.Body != want {
			t.Fatalf("%s: DRF received %s, want the canonical order %s", sp, last.Body, want)
		}
	}
}
