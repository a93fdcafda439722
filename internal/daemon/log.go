package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// newLogger builds the slog logger the config asks for; w defaults to
// stderr.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
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

// redisLogger routes go-redis' own log lines (one per failed dial while
// Redis is down) to slog at debug level: the pipeline already logs every
// store failure with its key and source, once.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.Debug("go-redis: " + fmt.Sprintf(format, v...))
}

var redisLoggerOnce sync.Once

// setRedisLogger installs the adapter; go-redis has one process-wide
// logger, so the first daemon's logger wins.
func setRedisLogger(log *slog.Logger) {
	redisLoggerOnce.Do(func() { redis.SetLogger(redisLogger{log}) })
}

// redactURL is raw for a log line: a basic-auth password in it (app.url
// may carry one) becomes "xxxxx".
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
