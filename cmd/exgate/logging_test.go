package main

import (
	"fmt"
	stdlog "log"
	"strings"
	"testing"

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
