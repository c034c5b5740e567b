package notsent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/notsent"
	"github.com/exgate/exgate/upstream"
)

// handshakeTimeout stands for net/http's unexported error of a TLS
// handshake past the Transport's TLSHandshakeTimeout, which it reads by
// its text.
type handshakeTimeout struct{}

func (handshakeTimeout) Error() string { return "net/http: TLS handshake timeout" }

// TestOneList: the backend round trip's proof that nothing was sent
// (upstream.NothingSent: the order may go to another instance) and the
// claim's (idempotency.NotSent: the claim is released, or was never run)
// are one list, and agree on every error. Before, they were two lists kept
// in step by hand, and had drifted: a refusal wrapped by something other
// than a dial (net/http's proxyconnect) was proof to one and not the
// other.
func TestOneList(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", refused, true},
		{"dial timed out", &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}, true},
		{"name not resolved", &url.Error{Op: "Post", URL: "http://x", Err: &net.DNSError{Err: "no such host", Name: "x"}}, true},
		{"refused, wrapped by proxyconnect", &net.OpError{Op: "proxyconnect", Net: "tcp", Err: refused}, true},
		{"certificate not verified", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"handshake timed out", fmt.Errorf("proxy: %w", handshakeTimeout{}), true},
		{"reset after writing", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"EOF", io.ErrUnexpectedEOF, false},
		{"an alert from the server", errors.New("remote error: tls: certificate required"), false},
		{"none", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []bool{notsent.Proves(tc.err), upstream.NothingSent(tc.err), idempotency.NotSent(tc.err)}
			for i, name := range []string{"notsent.Proves", "upstream.NothingSent", "idempotency.NotSent"} {
				if got[i] != tc.want {
					t.Errorf("%s(%v) = %v, want %v", name, tc.err, got[i], tc.want)
				}
			}
		})
	}
}
