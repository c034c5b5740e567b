package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/lograte"
)

// newLogger builds the process loggers: JSON on stderr, or a console
// encoder in dev mode. Outside dev mode lines are written in batches
// (256 KiB, at most a second late) rather than one write system call per
// access log line; gatewayCommand syncs them before the process exits.
// Both write the same lines to the same place: log is sampled when
// log.sampling says so, evidence never is — it writes what sampling must
// not thin out under load, the access log lines of orders, cancels and
// refusals (proxy.Options.Evidence) and the last line at exit.
func newLogger(lc config.Log, dev bool, w io.Writer) (log, evidence *zap.Logger, err error) {
	lvl, err := zapcore.ParseLevel(lc.Level)
	if err != nil {
		return nil, nil, fmt.Errorf("log.level: %w", err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "time"
	encCfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc := zapcore.NewJSONEncoder(encCfg)
	if dev {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		encCfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(encCfg)
	}
	var ws zapcore.WriteSyncer = zapcore.Lock(zapcore.AddSync(w))
	if !dev {
		ws = &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(writeOnly{w}), Size: 256 << 10, FlushInterval: time.Second}
	}
	core := zapcore.NewCore(enc, ws, lvl)
	sampled := core
	if lc.Sampling.Initial > 0 {
		sampled = zapcore.NewSamplerWithOptions(core, time.Second, lc.Sampling.Initial, lc.Sampling.Thereafter)
	}
	errOut := zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))
	return zap.New(sampled, errOut), zap.New(core, errOut), nil
}

// writeOnly hides its Writer's Sync from the buffered log, whose flush
// each second would otherwise call it: an *os.File's Sync is fsync, which
// forced a log file's lines to disk every second (a thread stalled for
// milliseconds on a busy disk) for nothing a crash of exgate would lose,
// since written lines are the kernel's to keep.
type writeOnly struct{ io.Writer }

// redisLogger sends go-redis's own log lines (pool dial failures, …) to
// zap at warn level, at most one a second so that a Redis outage cannot
// flood the log.
type redisLogger struct {
	log  *zap.Logger
	now  func() time.Time
	rate lograte.OncePerSecond
}

// newRedisLogger returns the logger go-redis writes to (redis.SetLogger).
func newRedisLogger(log *zap.Logger, now func() time.Time) *redisLogger {
	return &redisLogger{log: log, now: now}
}

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	if !l.rate.Allow(l.now()) {
		return
	}
	l.log.Warn(fmt.Sprintf(format, v...))
}

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
