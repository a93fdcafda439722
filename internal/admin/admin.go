// Package admin is the operator's side of the seen-set: inspect a message
// key (absent, inflight or done, with its remaining TTL) and forget it for
// an intentional replay. The same Keys serve the admin listener's
// /v1/keys/{key} API, behind a bearer token, and the `dedupe-proxy keys`
// command, which talks to the store directly.
//
// Keys are message keys as the app sees them in Idempotency-Key; Keys
// namespaces them with the consumer and the key space
// ("<consumer>:<space>:<key>") exactly as the pipeline does, so an
// operator never types the prefix.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// ErrInvalidKey is returned for a key no message can have: empty, longer
// than keys.MaxKeyBytes or not UTF-8.
var ErrInvalidKey = errors.New("admin: invalid key")

// ErrQuery marks a listing asked for with a bad state or limit.
var ErrQuery = errors.New("admin: bad query")

// Keys inspects and forgets one consumer's message keys.
type Keys struct {
	Store    seenset.Store
	Consumer string
	// Spaces are the consumer's key spaces (each source's key_space, by
	// default its name). A key is "<consumer>:<space>:<key>"; the space
	// may be left out when there is only one.
	// Store metrics come from an observed store (seenset.Observe).
	Spaces []string
	// Lease and TTL are seenset.lease and seenset.ttl: a claim or done
	// mark was written that long before it expires (written_at). Zero:
	// not shown.
	Lease, TTL time.Duration
}

// KeyStatus is the answer of GET /v1/keys/{key} and `keys status`.
type KeyStatus struct {
	Key   string `json:"key"`
	Space string `json:"space"`
	// State is absent, inflight or done.
	State string `json:"state"`
	// TTLSeconds is the time left on the lease (inflight) or on the done
	// mark; 0 when absent.
	TTLSeconds float64 `json:"ttl_seconds"`
	// Digest is the digest of the body the claim or the done mark was
	// written for (128 bits of SHA-256, base64url); absent for a key
	// marked done before digests were kept.
	Digest string `json:"digest,omitempty"`
	// WrittenAt is when the done mark was written (the commit), or the
	// claim taken or last renewed: its expiry less seenset.ttl (lease).
	// It is off by the difference if that setting changed since, and a
	// claim kept for a request that may still run expires later than a
	// lease.
	WrittenAt string `json:"written_at,omitempty"`
}

// status is a stored key's KeyStatus.
func (k *Keys) status(key, space string, st seenset.Status) KeyStatus {
	ks := KeyStatus{Key: key, Space: space, State: st.State.String(), TTLSeconds: math.Round(st.TTL.Seconds()*1000) / 1000,
		Digest: seenset.TokenDigest(st.Token)}
	life := k.TTL
	if st.State == seenset.Inflight {
		life = k.Lease
	}
	if st.State != seenset.Absent && life > 0 {
		ks.WrittenAt = time.Now().Add(st.TTL - life).UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
	}
	return ks
}

// ListOptions choose what `keys list` and GET /v1/keys show.
type ListOptions struct {
	Space string
	// State is "" (both), "inflight" or "done".
	State string
	// Prefix is the start of the message keys to show ("" for all).
	Prefix string
	// Limit is the most keys shown; 0 means DefaultListLimit.
	Limit int
}

// DefaultListLimit and MaxListLimit bound one listing: the keys of a busy
// consumer run into the millions.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// KeyList is the answer of GET /v1/keys and `keys list`.
type KeyList struct {
	Keys []KeyStatus `json:"keys"`
	// Truncated: there were more keys than Limit.
	Truncated bool `json:"truncated"`
}

// List pages through the keys of one space with SCAN (never KEYS) and
// returns up to Limit of them, in no particular order.
func (k *Keys) List(ctx context.Context, o ListOptions) (KeyList, error) {
	space, err := k.space(o.Space)
	if err != nil {
		return KeyList{}, err
	}
	var want seenset.State
	switch o.State {
	case "":
	case "inflight":
		want = seenset.Inflight
	case "done":
		want = seenset.Done
	default:
		return KeyList{}, fmt.Errorf("%w: state %q: want inflight or done", ErrQuery, o.State)
	}
	limit := o.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return KeyList{}, fmt.Errorf("%w: limit %d: want 1 to %d", ErrQuery, limit, MaxListLimit)
	}
	sc, ok := k.Store.(seenset.Scanner)
	if !ok {
		return KeyList{}, seenset.ErrNoScan
	}
	prefix := k.Consumer + ":" + space + ":"
	out := KeyList{Keys: []KeyStatus{}}
	err = sc.Scan(ctx, prefix+o.Prefix, func(key string, st seenset.Status) bool {
		if want != 0 && st.State != want {
			return true
		}
		if len(out.Keys) == limit {
			out.Truncated = true
			return false
		}
		out.Keys = append(out.Keys, k.status(strings.TrimPrefix(key, prefix), space, st))
		return true
	})
	if err != nil {
		return KeyList{}, err
	}
	return out, nil
}

// ForgetResult is the answer of DELETE /v1/keys/{key} and `keys forget`.
type ForgetResult struct {
	Key   string `json:"key"`
	Space string `json:"space"`
	// Forgotten is true when the key existed (inflight or done) and was
	// removed; false when it was absent already.
	Forgotten bool `json:"forgotten"`
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > keys.MaxKeyBytes:
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidKey, keys.MaxKeyBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidKey)
	}
	return nil
}

// ErrSpace is returned when the key space is missing (several exist) or
// unknown.
var ErrSpace = errors.New("admin: key space")

// space picks the key space: the one given, or the only one there is.
func (k *Keys) space(space string) (string, error) {
	if space == "" {
		switch len(k.Spaces) {
		case 1:
			return k.Spaces[0], nil
		case 0:
			return "", fmt.Errorf("%w: this consumer has no sources", ErrSpace)
		}
		return "", fmt.Errorf("%w: this consumer has several (%s); name one (API: ?space=NAME, CLI: --space NAME)", ErrSpace, strings.Join(k.Spaces, ", "))
	}
	if !slices.Contains(k.Spaces, space) {
		return "", fmt.Errorf("%w %q is not one of this consumer's (%s)", ErrSpace, space, strings.Join(k.Spaces, ", "))
	}
	return space, nil
}

// Status reports where key is in its life.
func (k *Keys) Status(ctx context.Context, space, key string) (KeyStatus, error) {
	if err := checkKey(key); err != nil {
		return KeyStatus{}, err
	}
	space, err := k.space(space)
	if err != nil {
		return KeyStatus{}, err
	}
	st, err := k.Store.Status(ctx, k.Consumer+":"+space+":"+key)
	if err != nil {
		return KeyStatus{}, err
	}
	return k.status(key, space, st), nil
}

// Forget removes key whatever its state, so the next delivery of it is
// forwarded again. Forgetting an inflight key also lets a redelivery be
// forwarded while the first forward may still be running.
func (k *Keys) Forget(ctx context.Context, space, key string) (ForgetResult, error) {
	if err := checkKey(key); err != nil {
		return ForgetResult{}, err
	}
	space, err := k.space(space)
	if err != nil {
		return ForgetResult{}, err
	}
	existed, err := k.Store.Forget(ctx, k.Consumer+":"+space+":"+key)
	if err != nil {
		return ForgetResult{}, err
	}
	return ForgetResult{Key: key, Space: space, Forgotten: existed}, nil
}

// Command runs `keys status KEY` or `keys forget KEY` and prints the same
// JSON the API answers, one line.
func (k *Keys) Command(ctx context.Context, sub, space, key string, stdout io.Writer) error {
	var v any
	var err error
	switch sub {
	case "status":
		v, err = k.Status(ctx, space, key)
	case "forget":
		v, err = k.Forget(ctx, space, key)
	default:
		return fmt.Errorf("unknown keys command %q (want status or forget)", sub)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(v)
}

// LoadToken returns the API token: admin.token, or the trimmed content of
// admin.token_file (read once, at start). "" means the API is off.
func LoadToken(c config.Admin) (string, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	raw, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("admin.token_file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	if tok == "" {
		return "", fmt.Errorf("admin.token_file %s: is empty", c.TokenFile)
	}
	return tok, nil
}

// Handler serves GET (and HEAD) and DELETE /v1/keys/{key} for requests that
// carry "Authorization: Bearer <token>". It checks the token before it
// looks at the path, so any other request it is given gets 401 too: mount
// it for every path the server does not serve publicly, not behind a
// router. token must not be empty: without one, do not mount the API.
//
// The key is the escaped path after /v1/keys/, unescaped once and never
// cleaned: /v1/keys/a//b names the key "a//b" and /v1/keys/a%2Fb the key
// "a/b". A router that cleans paths would answer the first with a redirect
// to /v1/keys/a/b, which a client follows with its method, DELETE
// included: it would forget a key the operator never named.
func (k *Keys) Handler(token string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return requireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() == "/v1/keys" {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method not allowed"})
				return
			}
			q := r.URL.Query()
			limit := 0
			if v := q.Get("limit"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					writeError(w, fmt.Errorf("%w: limit %q: want a number", ErrQuery, v))
					return
				}
				limit = n
			}
			res, err := k.List(r.Context(), ListOptions{Space: q.Get("space"), State: q.Get("state"), Prefix: q.Get("prefix"), Limit: limit})
			if err != nil {
				writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, res)
			return
		}
		key, ok, err := keyFromPath(r.URL)
		if !ok {
			writeJSON(w, http.StatusNotFound, errorBody{Error: "not found"})
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			st, err := k.Status(r.Context(), r.URL.Query().Get("space"), key)
			if err != nil {
				writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, st)
		case http.MethodDelete:
			res, err := k.Forget(r.Context(), r.URL.Query().Get("space"), key)
			if err != nil {
				writeError(w, err)
				return
			}
			// An intentional replay is worth a line in the log, always.
			log.Info("key forgotten via the admin API", "key", res.Key, "space", res.Space, "existed", res.Forgotten, "remote", r.RemoteAddr)
			writeJSON(w, http.StatusOK, res)
		default:
			w.Header().Set("Allow", "GET, HEAD, DELETE")
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method not allowed"})
		}
	}))
}

// keysPath is the prefix of the key API's paths.
const keysPath = "/v1/keys/"

// keyFromPath returns the key a request names; ok is false when its path
// is not under keysPath. The prefix is matched on the escaped path, so
// /v1%2Fkeys/x is not the API, and the rest is unescaped exactly once.
func keyFromPath(u *url.URL) (key string, ok bool, err error) {
	raw, ok := strings.CutPrefix(u.EscapedPath(), keysPath)
	if !ok {
		return "", false, nil
	}
	key, err = url.PathUnescape(raw)
	if err != nil {
		// EscapedPath is always validly escaped; should that change, a
		// bad escape is a 400, never a guess at the key.
		return "", true, fmt.Errorf("%w: bad percent-encoding", ErrInvalidKey)
	}
	return key, true, nil
}

// requireToken compares SHA-256 digests in constant time: the comparison
// takes as long whatever the presented token, its length included.
func requireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r.Header.Get("Authorization"))
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dedupe-proxy"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "missing or wrong bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusServiceUnavailable // the store could not answer
	if errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrSpace) || errors.Is(err, ErrQuery) || errors.Is(err, seenset.ErrInvalidArgument) {
		status = http.StatusBadRequest
	}
	writeJSON(w, status, errorBody{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
