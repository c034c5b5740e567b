package proxy

import "net/http"

// AdminHandler returns the handler of the admin listener: /healthz answers
// 200 while the process serves; /readyz answers 200 until SetDraining, then
// 503, so load balancers stop sending traffic before the listener closes.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if g.Draining() {
			writeStatus(w, http.StatusServiceUnavailable, `{"status":"draining"}`)
			return
		}
		writeStatus(w, http.StatusOK, `{"status":"ready"}`)
	})
	return mux
}

func writeStatus(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}
