package upstream

import "net/http"

// Transport returns a RoundTripper that sends each request to an instance
// of s, chosen as Pick chooses, over rt (the service's own Transport when
// it has one: RoundTripper), on connections of their own (ownPool), not
// queued behind client traffic: the request's scheme and host are
// replaced by the instance's (its path is kept). It is for exgate's own
// requests to a service (the market catalogue), whose outcomes count in
// the instances' outlier detection like any other, as those of one client
// (the zero Client).
func (s *Service) Transport(rt http.RoundTripper) http.RoundTripper {
	return serviceTransport{s: s, rt: ownPool(s.RoundTripper(rt))}
}

type serviceTransport struct {
	s  *Service
	rt http.RoundTripper
}

// RoundTrip sends req to an instance of the service.
func (t serviceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	inst, err := t.s.Pick()
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = inst.URL.Scheme, inst.URL.Host, ""
	res, err := t.rt.RoundTrip(out)
	k := KindOf(req.Method)
	switch {
	case err != nil && NeverTaken(err):
		inst.Done(ConnectFailure, k, 0)
	case err != nil:
		inst.Done(ServerError, k, 0)
	case res.StatusCode >= 500:
		inst.Done(ServerError, k, 0)
	default:
		inst.Done(Success, k, 0)
	}
	return res, err
}
