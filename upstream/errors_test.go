package upstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/tlstest"
)

// TestNothingSentTLS: a round trip whose TLS handshake failed exgate's
// verification of the instance's certificate sent nothing of the request
// (NothingSent): an order may go to another instance, and its claim is
// released (idempotency.NotSent), where it was answered 502 as an outcome
// unknown and its identifier refused for the retention. A client
// certificate the instance refuses proves nothing: in TLS 1.3 its alert
// comes after exgate has written the request.
func TestNothingSentTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	other := tlstest.NewCA(t, t.TempDir())
	srv := mtlsBackend(t, ca, ca, dir)
	client := ca.Issue(dir, "exgate", []string{"exgate-client"}, tlstest.Options{Client: true})
	for _, tt := range []struct {
		name       string
		c          config.BackendTLS
		serverName string
		want       bool
		refused    bool // HandshakeRefused: the instance sent an alert
	}{
		{"the instance's certificate from an unknown authority", config.BackendTLS{CAFile: other.File, CertFile: client.CertFile, KeyFile: client.KeyFile}, "", true, false},
		{"the instance's certificate for another name", config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile}, "elsewhere.test", true, false},
		{"no client certificate, refused by the instance", config.BackendTLS{CAFile: ca.File}, "", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ct, err := LoadClientTLS(tt.c, "upstream.tls", tt.serverName, nil)
			if err != nil {
				t.Fatal(err)
			}
			tr := testTransport()
			ct.Apply(tr)
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest("POST", srv.URL+"/api/v1/odr/orders/", strings.NewReader(`{"symbol":"BTC_USDT"}`))
			res, err := tr.RoundTrip(req)
			if err == nil {
				res.Body.Close()
				t.Fatalf("round trip answered %d, want a failed handshake", res.StatusCode)
			}
			if got := NothingSent(err); got != tt.want {
				t.Errorf("NothingSent(%v) = %v, want %v", err, got, tt.want)
			}
			if got := HandshakeRefused(fmt.Errorf("proxy: %w", err)); got != tt.refused {
				t.Errorf("HandshakeRefused(%v) = %v, want %v", err, got, tt.refused)
			}
		})
	}
}

// TestNothingSentHandshakeTimeout: an instance that takes the connection
// and never finishes the TLS handshake was sent nothing of the request
// when the Transport's TLSHandshakeTimeout ends the round trip.
func TestNothingSentHandshakeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // the ClientHello, and no answer
	}()
	tr := testTransport()
	tr.TLSHandshakeTimeout = 50 * time.Millisecond
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "https://"+ln.Addr().String()+"/api/v1/odr/orders/", strings.NewReader(`{"symbol":"BTC_USDT"}`))
	res, err := tr.RoundTrip(req)
	if err == nil {
		res.Body.Close()
		t.Fatal("round trip answered, want a handshake timeout")
	}
	if !NothingSent(err) || !HandshakeTimedOut(fmt.Errorf("proxy: %w", err)) {
		t.Errorf("NothingSent(%v) = %v, HandshakeTimedOut = %v; want both true", err, NothingSent(err), HandshakeTimedOut(err))
	}
	if NothingSent(context.DeadlineExceeded) {
		t.Error("NothingSent(context.DeadlineExceeded) = true: a deadline says nothing of where the round trip was")
	}
}
