package upstream

import (
	"crypto/tls"
	"errors"
	"net"
)

// NothingSent reports whether err, a round trip's error, proves that no
// byte of the request reached the instance: the connection was never made
// (refused, unreachable, timed out while connecting, or its name did not
// resolve), or the instance's certificate failed exgate's verification in
// the TLS handshake (unknown authority, expired, another name), which
// ends before net/http writes any of the request. Only then may a request
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
	if errors.As(err, &verify) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
