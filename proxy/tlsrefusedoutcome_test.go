package proxy

import (
	"crypto/tls"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestRefusedClientCertificateIsAConnectFailure: an instance whose TLS
// handshake refuses exgate's client certificate (none, expired, of
// another authority) serves none of exgate's requests, whoever sends
// them: outlier detection counts each as a connect failure (Envoy's
// locally originated error: communication with the instance never
// began), ejected for connect_failure and never sent requests in panic
// mode, as an instance refusing connections. Before, each counted as a
// server error: a 5xx run, judged by client, ejected it only as a
// backend bug, and panic mode sent it requests again.
func TestRefusedClientCertificateIsAConnectFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version uint16
	}{
		{"TLS 1.2: the alert ends the handshake", tls.VersionTLS12},
		{"TLS 1.3: the alert after the client's handshake", tls.VersionTLS13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const reads = 3
			url, tr := refusingClientCert(tc.version)(t)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(url)
			cfg.Upstream.Outlier.Consecutive5xx, cfg.Upstream.Outlier.ConsecutiveConnectFailures = 0, reads
			e := serve(t, cfg, &backend{}, Options{Transport: tr})
			svc := e.gw.fleet.Service("")
			inst := svc.Status()[0].Addr
			for i := range reads {
				res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
				res.Body.Close()
				if res.StatusCode < 500 {
					t.Fatalf("read %d answered %d by an instance refusing exgate's certificate", i, res.StatusCode)
				}
			}
			st := svc.Status()[0]
			if st.Requests["connect_failure"] != reads || st.Requests["server_error"] != 0 {
				t.Errorf("%s ended %d connect failures and %d server errors, want %d and 0", inst,
					st.Requests["connect_failure"], st.Requests["server_error"], reads)
			}
			if st.State != "ejected" || st.Reason != "connect_failure" {
				t.Errorf("%s is %s (%s), want ejected for connect_failure", inst, st.State, st.Reason)
			}
		})
	}
}
