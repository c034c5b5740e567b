package upstream

import (
	"crypto/tls"
	"errors"
	"net"
)

// NothingSent reports whether err, a round trip's error, proves that no
// byte of the request reached the instance: the connection was never made
// (refused, unreachable, timed out while connecting, or its name did not
// resolve), or the TLS handshake failed exgate's verification of the
// instance's certificate (unknown authority, expired, another name) or
// did not end within the Transport's TLSHandshakeTimeout
// (HandshakeTimedOut): net/http writes the request only once the
// handshake is over. Only then may a request
// that is not safe to repeat, an order above all, be sent to another
// instance. An alert the instance sends (a client certificate it refuses)
// is not such proof: in TLS 1.3 it comes after the client has finished
// its handshake and written the request.
func NothingSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) || HandshakeTimedOut(err) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
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
