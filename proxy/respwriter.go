package proxy

import (
	"net/http"
)

// respWriter records the status and size of a response.
type respWriter struct {
	http.ResponseWriter
	st     *requestState
	status int
	bytes  int64
	// hinting is set while the backend's answer is awaited (forward, until
	// endHints): a 1xx it sends meanwhile (103 Early Hints) reaches the
	// client through ReverseProxy, which adds the 1xx's fields to the
	// answer's header, writes it and clears the header (proxy/interim.go).
	hinting bool
	// own is the header as it stood when ReverseProxy first read it for a
	// 1xx, before adding the 1xx's fields: exgate's own (RateLimit, CORS),
	// which the final answer gets back (endHints), without the 1xx's.
	own http.Header
	// interims counts the backend's 1xx answers (passInterim); http10 is
	// set for a client speaking HTTP/1.0, which gets none of them.
	interims int
	http10   bool
}

// WriteHeader records the final status; informational ones pass through,
// their fields filtered as a final answer's are (hint). The first final
// status of a proxied request marks the backend's answer. A final answer
// without a Content-Type is written without one; one after a 1xx gets
// back exgate's own fields, which ReverseProxy cleared (endHints).
func (w *respWriter) WriteHeader(code int) {
	if code < 200 {
		if !w.passInterim() {
			return
		}
		w.hint()
	} else {
		w.endHints()
	}
	if w.status == 0 && code >= 200 {
		w.status = code
		if h := w.ResponseWriter.Header(); h["Content-Type"] == nil {
			// An answer the backend sent without a type goes without
			// one: net/http would guess one from the body (text/html
			// for a body that starts like HTML).
			h["Content-Type"] = nil
		}
		if !w.st.upStart.IsZero() && !w.st.upDone {
			w.st.upStatus = code // the backend's answer, as ReverseProxy writes it
			w.st.clientsID()
		}
		w.st.g.observeUpstream(w.st)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records the bytes written.
func (w *respWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush flushes the underlying writer when it can.
func (w *respWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
