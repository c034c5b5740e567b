package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
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
// comes after exgate has written the request. Each is a request the
// instance never took (NeverTaken).
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
	}{
		{"the instance's certificate from an unknown authority", config.BackendTLS{CAFile: other.File, CertFile: client.CertFile, KeyFile: client.KeyFile}, "", true},
		{"the instance's certificate for another name", config.BackendTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile}, "elsewhere.test", true},
		{"no client certificate, refused by the instance", config.BackendTLS{CAFile: ca.File}, "", false},
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
			if !NeverTaken(fmt.Errorf("proxy: %w", err)) { // a connect failure to outlier detection
				t.Errorf("NeverTaken(%v) = false, want true", err)
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

// TestNeverTaken: outlier detection counts as a connect failure what
// the instance never took, the closed connection included that a TLS
// 1.3 alert, read while the request was being written, leaves as the
// round trip's error; an answer cut short is a server error.
func TestNeverTaken(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"the instance's alert", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true},
		{"the write on the connection the Transport closed", fmt.Errorf("wrapped: %w", &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}), true},
		{"the answer cut short", io.ErrUnexpectedEOF, false},
		{"the connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := NeverTaken(tt.err); got != tt.want {
				t.Errorf("NeverTaken(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
