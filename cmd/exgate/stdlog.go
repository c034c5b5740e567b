package main

import (
	stdlog "log"
	"strings"

	"go.uber.org/zap"
)

// unsolicitedPrefix starts the line net/http's Transport writes to the
// standard logger when a backend sends bytes on an idle keep-alive
// connection, before it closes the connection. The line quotes those
// bytes: a response that may hold another account's data.
const unsolicitedPrefix = "Unsolicited response received on idle HTTP channel"

// stdLogWriter turns the standard logger's lines into warnings of the
// process logger, so that nothing the standard library reports (net/http
// among others) bypasses the log's format and level, and drops what the
// Transport quotes of a stray response.
type stdLogWriter struct{ log *zap.Logger }

func (w stdLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	if strings.HasPrefix(msg, unsolicitedPrefix) {
		w.log.Warn("the backend sent a response no request asked for on an idle connection; the connection was closed (its bytes are not logged)")
		return len(p), nil
	}
	w.log.Warn(msg)
	return len(p), nil
}

// redirectStdLog sends the standard logger's output to l (see
// stdLogWriter) and returns a function that restores it.
func redirectStdLog(l *zap.Logger) (restore func()) {
	out, flags := stdlog.Writer(), stdlog.Flags()
	stdlog.SetOutput(stdLogWriter{log: l})
	stdlog.SetFlags(0)
	return func() {
		stdlog.SetOutput(out)
		stdlog.SetFlags(flags)
	}
}
