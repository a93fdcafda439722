package daemon

import (
	"io"
	"log/slog"
	"os"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// NewLogger builds the slog logger the config asks for; w defaults to
// stderr.
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	if w == nil {
		w = os.Stderr
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
