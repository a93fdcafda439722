// Package redrive is `dedupe-proxy redrive`: it moves a source's dead
// letters back to the source through the source's broker.Redriver,
// optionally forgetting each message's key in the seen-set first, and
// prints one line per message and a summary.
//
// By default a redriven message keeps its key, and the pipeline decides
// as for any delivery: a key that is done (the message did succeed
// before) is acked as a duplicate without reaching the app, any other
// is forwarded. With ForgetKeys each key is forgotten just before its
// message is republished, so the message is processed again.
package redrive

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/admin"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// Options of one Run.
type Options struct {
	// Source names the source, for the summary line.
	Source   string
	Redriver broker.Redriver
	// Keys is the source's key rules: each line shows the key the
	// pipeline will find.
	Keys *keys.Extractor
	// ForgetKeys forgets each message's key in Space of Store before
	// the message is republished.
	ForgetKeys bool
	Store      seenset.Store
	Consumer   string
	Space      string // the source's stored key space (config.Source.StoredKeySpace)
	DryRun     bool
	Limit      int
	// Out gets one line per dead letter and the summary.
	Out io.Writer
	// Quiet leaves out the line per dead letter and the progress: the
	// summary only.
	Quiet bool
	// JSON writes each line to Out as one JSON object (per dead letter:
	// action, key or no_key, from, to, note; the summary: source,
	// dry_run, moved, forgotten, skipped, more, error).
	JSON bool
	// Progress gets, on a long run, a line every ProgressEvery (default
	// 2s) with the count so far and the rate; nil: none.
	Progress      io.Writer
	ProgressEvery time.Duration
	// now is time.Now; tests set it.
	now func() time.Time
}

// Summary is what a Run did.
type Summary struct {
	broker.RedriveResult
	Forgotten int // keys that were in the seen-set and were forgotten
}

// Run moves (or lists) the dead letters and prints them; the summary
// line is printed whether it stops on an error or not.
func Run(ctx context.Context, o Options) (Summary, error) {
	var sum Summary
	notes := map[*broker.Message]string{}
	k := &admin.Keys{Store: o.Store, Consumer: o.Consumer, Spaces: []string{o.Space}}
	ro := broker.RedriveOptions{Limit: o.Limit, DryRun: o.DryRun}
	if o.ForgetKeys {
		ro.Before = func(ctx context.Context, r broker.Redriven) error {
			key, _ := o.Keys.Key(r.Message)
			if key == "" {
				notes[r.Message] = "no key to forget"
				return nil
			}
			st, err := k.Status(ctx, o.Space, key)
			if err != nil {
				return fmt.Errorf("seen-set: key %q: %w (the dead letter was not moved)", key, err)
			}
			if st.State == seenset.Inflight.String() {
				// Being forwarded right now, by a copy in the source:
				// forgetting it could let two run at the app at once.
				notes[r.Message] = "key inflight, not forgotten"
				return nil
			}
			f, err := k.Forget(ctx, o.Space, key)
			if err != nil {
				return fmt.Errorf("seen-set: forget key %q: %w (the dead letter was not moved)", key, err)
			}
			if f.Forgotten {
				sum.Forgotten++
				notes[r.Message] = "key forgotten"
			} else {
				notes[r.Message] = "key was absent"
			}
			return nil
		}
	}
	verb, action := "moved", "moved"
	if o.DryRun {
		verb, action = "would move", "would_move"
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 2 * time.Second
	}
	start := o.now()
	lastProgress, count := start, 0
	ro.Moved = func(r broker.Redriven) {
		count++
		note := notes[r.Message]
		delete(notes, r.Message)
		if o.Progress != nil && !o.Quiet {
			if now := o.now(); now.Sub(lastProgress) >= o.ProgressEvery {
				lastProgress = now
				fmt.Fprintf(o.Progress, "redrive %s: %s %d so far, %.0f/s\n", o.Source, verb, count, float64(count)/now.Sub(start).Seconds())
			}
		}
		if o.Quiet {
			return
		}
		key, why := o.Keys.Key(r.Message)
		if o.JSON {
			line := messageLine{Action: action, Key: key, From: r.From, To: r.To, Note: note}
			if key == "" {
				line.NoKey = why
			}
			_ = json.NewEncoder(o.Out).Encode(line)
			return
		}
		shown := fmt.Sprintf("%q", key)
		if key == "" {
			shown = "(no key: " + why + ")"
		}
		line := fmt.Sprintf("%s %s  %s → %s", verb, shown, r.From, r.To)
		if note != "" {
			line += "  (" + note + ")"
		}
		fmt.Fprintln(o.Out, line)
	}
	res, err := o.Redriver.Redrive(ctx, ro)
	sum.RedriveResult = res
	if o.JSON {
		sl := summaryLine{Source: o.Source, DryRun: o.DryRun, Moved: res.Moved, Forgotten: sum.Forgotten, Skipped: res.Skipped, More: res.More,
			Seconds: o.now().Sub(start).Seconds()}
		if err != nil {
			sl.Error = err.Error()
		}
		_ = json.NewEncoder(o.Out).Encode(sl)
	} else {
		fmt.Fprintln(o.Out, sum.line(o, err))
	}
	return sum, err
}

// messageLine is a dead letter's line under -o json.
type messageLine struct {
	Action string `json:"action"` // moved, would_move
	Key    string `json:"key,omitempty"`
	NoKey  string `json:"no_key,omitempty"` // why the key rules found none
	From   string `json:"from"`
	To     string `json:"to"`
	Note   string `json:"note,omitempty"` // --forget-keys: what became of the key
}

// summaryLine is the summary under -o json.
type summaryLine struct {
	Source    string  `json:"source"`
	DryRun    bool    `json:"dry_run"`
	Moved     int     `json:"moved"`
	Forgotten int     `json:"forgotten"`
	Skipped   int     `json:"skipped"`
	More      bool    `json:"more"`
	Seconds   float64 `json:"seconds"`
	Error     string  `json:"error,omitempty"`
}

// line is the summary; a run that stopped on err says so, so that
// "moved 0" is not read as "there was nothing to move".
func (s Summary) line(o Options, err error) string {
	var b strings.Builder
	if o.DryRun {
		fmt.Fprintf(&b, "redrive %s (dry run): would move %d dead letter(s); nothing changed", o.Source, s.Moved)
	} else {
		fmt.Fprintf(&b, "redrive %s: moved %d dead letter(s)", o.Source, s.Moved)
		if o.ForgetKeys {
			fmt.Fprintf(&b, ", %d key(s) forgotten", s.Forgotten)
		}
	}
	if s.Skipped > 0 {
		fmt.Fprintf(&b, "; %d of other sources left in place", s.Skipped)
	}
	if s.More {
		fmt.Fprintf(&b, "; --limit %d reached, more remain", o.Limit)
	}
	if err != nil {
		b.WriteString("; stopped on an error, the rest not looked at")
	}
	return b.String()
}
