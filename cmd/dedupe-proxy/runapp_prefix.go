package main

import (
	"bytes"
	"io"
	"sync"
)

// appLinePrefix marks the app's own lines in `run -- APP`'s output, which
// the proxy's log lines share, as docker compose marks a service's.
const appLinePrefix = "app | "

// prefixWriter writes each line with prefix in front. A line is written
// as soon as a part of it arrives, prefix and all in one Write, so a line
// the app leaves unfinished (a prompt, its last words) is never held back.
type prefixWriter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  []byte
	midLine bool
	buf     []byte
}

func prefixLines(w io.Writer, prefix string) io.Writer {
	return &prefixWriter{w: w, prefix: []byte(prefix)}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = p.buf[:0]
	for rest := b; len(rest) > 0; {
		if !p.midLine {
			p.buf = append(p.buf, p.prefix...)
		}
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line = rest[:i+1]
		}
		p.buf = append(p.buf, line...)
		p.midLine = line[len(line)-1] != '\n'
		rest = rest[len(line):]
	}
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
