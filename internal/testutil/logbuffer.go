package testutil

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// LogBuffer is an io.Writer for a test's logger that the goroutines of
// the code under test can share, read back with String.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// JSONLogger logs every level as JSON lines into l, for Records and With.
func (l *LogBuffer) JSONLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Records parses what a JSONLogger wrote, one map per line.
func (l *LogBuffer) Records(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// With returns the records whose msg starts with prefix at level ("" for
// any level).
func (l *LogBuffer) With(t testing.TB, level, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range l.Records(t) {
		if msg, _ := r["msg"].(string); strings.HasPrefix(msg, prefix) && (level == "" || r["level"] == level) {
			out = append(out, r)
		}
	}
	return out
}
