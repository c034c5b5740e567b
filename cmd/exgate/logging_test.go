package main

import (
	"fmt"
	stdlog "log"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestStdLogRedirected checks that the standard logger's lines become
// warnings, and that net/http's report of a stray backend response does
// not carry the response's bytes into the log.
func TestStdLogRedirected(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	restore := redirectStdLog(zap.New(core))
	stdlog.Printf("Unsolicited response received on idle HTTP channel starting with %q; err=%v",
		"HTTP/1.1 200 OK\r\n\r\n{\"balance\":\"12.5\"}", nil)
	stdlog.Print("http: some other problem")
	restore()
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d log entries, want 2", len(entries))
	}
	for _, e := range entries {
		if e.Level != zapcore.WarnLevel || strings.Contains(e.Message, "balance") {
			t.Errorf("entry %v %q", e.Level, e.Message)
		}
	}
	if entries[1].Message != "http: some other problem" {
		t.Errorf("message %q", entries[1].Message)
	}
	if w := fmt.Sprintf("%T", stdlog.Writer()); w == "main.stdLogWriter" {
		t.Error("the standard logger was not restored")
	}
}

// syncCounter is a log destination that counts its Sync calls.
type syncCounter struct {
	strings.Builder
	syncs int
}

func (c *syncCounter) Sync() error { c.syncs++; return nil }

// TestLogFlushDoesNotSync checks that flushing the buffered log writes its
// lines without calling the destination's Sync (fsync, for a file).
func TestLogFlushDoesNotSync(t *testing.T) {
	var dst syncCounter
	log, _, err := newLogger(config.Default().Log, false, &dst)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("a line")
	if err := log.Sync(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dst.String(), "a line") {
		t.Errorf("flushed %q, want the line", dst.String())
	}
	if dst.syncs != 0 {
		t.Errorf("the destination's Sync was called %d times, want 0", dst.syncs)
	}
}
