// Package notsent holds the one list of the errors that prove a request
// never left exgate: a backend round trip's (upstream.NothingSent, which
// decides whether an order may go to another instance and whether its
// claim is released) and a Redis call's (idempotency.NotSent, which
// decides whether a claim may have run). Both read this list, so the two
// cannot drift apart.
package notsent

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// Proves reports whether err, a round trip's error, proves that no byte
// of the request reached the server: the connection was never made
// (refused, unreachable, timed out while connecting, or its name did not
// resolve), or the TLS handshake failed exgate's verification of the
// server's certificate (unknown authority, expired, another name) or did
// not end within the Transport's TLSHandshakeTimeout (HandshakeTimedOut):
// net/http and go-redis write a request only once the handshake is over.
// A refusal of the connection (ECONNREFUSED) is proof wherever it is
// wrapped (net/http's proxyconnect, a dial of a proxy): TCP answers it
// only to a connect. An alert the server sends (a client certificate it
// refuses) is not such proof: in TLS 1.3 it comes after the client has
// finished its handshake and written the request; nor are timeouts,
// resets or EOF after writing.
func Proves(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) || HandshakeTimedOut(err) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

// tlsHandshakeTimeout is the text of net/http's error for a TLS handshake
// that did not end within Transport.TLSHandshakeTimeout, whose type it
// does not export.
const tlsHandshakeTimeout = "net/http: TLS handshake timeout"

// HandshakeTimedOut reports whether err is, or wraps, net/http's error of
// a TLS handshake that did not end within Transport.TLSHandshakeTimeout:
// the request is written only once the handshake is over, so nothing of
// it was sent.
func HandshakeTimedOut(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == tlsHandshakeTimeout {
			return true
		}
	}
	return false
}
