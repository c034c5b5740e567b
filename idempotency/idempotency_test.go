package idempotency

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/unreachable"
)

// roundTrip sends a POST through a fresh transport to addr.
func roundTrip(t *testing.T, addr string, timeout time.Duration) error {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/v1/odr/orders/", strings.NewReader(`{"identifier":"a"}`))
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("round trip succeeded")
	}
	return err
}

// server accepts connections and hands each, after reading a whole
// request, to handle.
func server(t *testing.T, handle func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					handle(c)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestNotSent(t *testing.T) {
	// Nothing listens: refused at dial.
	closed := unreachable.Refused(t)
	if err := roundTrip(t, closed, 5*time.Second); !NotSent(err) {
		t.Errorf("connection refused: NotSent(%v) = false", err)
	}

	// The backend read the request and hung up: it may have acted on it.
	hangUp := server(t, func(net.Conn) {})
	if err := roundTrip(t, hangUp, 5*time.Second); NotSent(err) {
		t.Errorf("connection closed after the request: NotSent(%v) = true", err)
	}

	// The backend read the request and never answered.
	stall := server(t, func(c net.Conn) { _, _ = c.Read(make([]byte, 1)) })
	if err := roundTrip(t, stall, 100*time.Millisecond); NotSent(err) {
		t.Errorf("timeout after sending: NotSent(%v) = true", err)
	}

	// The backend reset the connection after reading the request.
	reset := server(t, func(c net.Conn) { _ = c.(*net.TCPConn).SetLinger(0) })
	if err := roundTrip(t, reset, 5*time.Second); NotSent(err) {
		t.Errorf("reset after sending: NotSent(%v) = true", err)
	}

	// The backend takes the connection and never finishes the TLS
	// handshake: the request, written after it, was never sent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = io.Copy(io.Discard, c) // the ClientHello, and no answer
			c.Close()
		}
	}()
	hello := ln.Addr().String()
	tr := &http.Transport{TLSHandshakeTimeout: 50 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, "https://"+hello+"/api/v1/odr/orders/", strings.NewReader(`{"identifier":"a"}`))
	if res, err := tr.RoundTrip(req); err == nil {
		res.Body.Close()
		t.Error("a TLS round trip to a server that never answers its handshake succeeded")
	} else if !NotSent(err) {
		t.Errorf("TLS handshake timeout: NotSent(%v) = false", err)
	}
	tr.CloseIdleConnections()

	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("EOF"), false},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}, true},
		{&net.DNSError{Err: "no such host", Name: "backend", IsNotFound: true}, true},
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{fmt.Errorf("proxy: %w", &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}), true},
		{&net.OpError{Op: "remote error", Err: tls.AlertError(42)}, false}, // bad_certificate: TLS 1.3 sends it after the request
	} {
		if got := NotSent(tt.err); got != tt.want {
			t.Errorf("NotSent(%#v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestAnswers(t *testing.T) {
	for o, code := range map[Outcome]string{InProgress: "request_in_progress", Conflict: "duplicate_identifier", Unknown: "outcome_unknown"} {
		a := Refusal(o)
		if a.Status != 409 || a.Code != code || !strings.HasSuffix(a.Detail, ".") {
			t.Errorf("Refusal(%s) = %+v", o, a)
		}
	}
	if a := Refusal(Claimed); a.Status != 500 {
		t.Errorf("Refusal(Claimed) = %+v", a)
	}
	for code, a := range map[string]*apierror.Error{"duplicate_protection_unavailable": Unavailable(), "duplicate_protection_full": Full(), "identifier_quota_exceeded": AccountFull()} {
		if a.Status != 503 || a.Code != code || a.Detail == "" {
			t.Errorf("answer %s = %+v", code, a)
		}
	}
	for o, s := range map[Outcome]string{Claimed: "claimed", InProgress: "in_progress", Conflict: "conflict", Replay: "replay", Unknown: "unknown", 0: "outcome(0)"} {
		if o.String() != s {
			t.Errorf("%d.String() = %q", int(o), o.String())
		}
	}
}

func TestFingerprint(t *testing.T) {
	a, b := FingerprintOf([]byte(`{"a":1}`)), FingerprintOf([]byte(`{"a": 1}`))
	if a == b || a != FingerprintOf([]byte(`{"a":1}`)) {
		t.Error("fingerprints must follow the bytes exactly")
	}
}

func TestOptionsFromConfig(t *testing.T) {
	o := OptionsFrom(config.DefaultIdempotency())
	want := Options{Retention: 24 * time.Hour, InFlightTimeout: 30 * time.Second, MaxResponseBytes: 64 << 10,
		Timeout: 100 * time.Millisecond, KeyPrefix: "exgate:idem:", MaxEntries: 1000000, MaxBytes: 1 << 30}
	if o.Now != nil || o.Retention != want.Retention || o.InFlightTimeout != want.InFlightTimeout ||
		o.MaxResponseBytes != want.MaxResponseBytes || o.Timeout != want.Timeout || o.KeyPrefix != want.KeyPrefix ||
		o.MaxEntries != want.MaxEntries || o.MaxBytes != want.MaxBytes || o.MaxPerAccount != 0 || o.MaxBytesPerAccount != 0 {
		t.Errorf("OptionsFrom(default) = %+v", o)
	}
	if d := (Options{}).withDefaults(); d.Retention != want.Retention || d.Now == nil || d.KeyPrefix != want.KeyPrefix ||
		d.MaxPerAccount != 200000 || d.MaxBytesPerAccount != 200<<20 {
		t.Errorf("zero Options defaults = %+v", d)
	}
}
