package seenset

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/rediscoalesce"
	"github.com/dedupe-proxy/dedupe-proxy/internal/redisconn"
)

// RedisOptions configures NewRedis, and are the seenset.redis block of
// the config file as it is (the mapstructure names are its keys). One
// address is a standalone server, several are Cluster seeds, and
// MasterName selects Sentinel (Addrs are then the sentinels), following
// redis.NewUniversalClient. Zero durations and PoolSize take go-redis'
// defaults.
type RedisOptions struct {
	Addrs []string `mapstructure:"addrs"`
	// MasterName is the Sentinel master set name; empty for standalone and
	// Cluster.
	MasterName string `mapstructure:"master_name"`
	Username   string `mapstructure:"username"`
	Password   string `mapstructure:"password"`
	// DB is ignored by Cluster, which has only database 0.
	DB int `mapstructure:"db"`
	// TLS turns on TLS with the system's roots, TLS 1.2 at least.
	TLS bool `mapstructure:"tls"`
	// Prefix is prepended to every key, so several deployments (or tests)
	// can share one Redis without seeing each other's keys.
	Prefix       string        `mapstructure:"prefix"`
	DialTimeout  time.Duration `mapstructure:"dial_timeout"`
	ReadTimeout  time.Duration `mapstructure:"read_timeout"`
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	PoolSize     int           `mapstructure:"pool_size"`
	// WaitReplicas, when positive, makes every claim and commit (every
	// write) wait until that many replicas of the key's master have it
	// (Redis WAIT), so that a failover to one of them cannot lose it.
	// Fewer acknowledgements within WaitTimeout fail the call with
	// ErrUnavailable: the message is neither forwarded nor acked on the
	// strength of a write a failover may lose. WaitTimeout must be
	// positive then, and below ReadTimeout.
	WaitReplicas int           `mapstructure:"wait_replicas"`
	WaitTimeout  time.Duration `mapstructure:"wait_timeout"`
	// HashKeysOver, when positive, stores a key longer than that many
	// bytes as "#" and the unpadded base64url SHA-256 of the key (44
	// bytes) instead of the key itself: a 200-byte key then takes 198
	// bytes of Redis memory instead of 358 (Redis 7.0, measured). 0 keeps every key as it
	// is. Changing it moves the long keys: every replica of a consumer
	// must use the same value (see docs/redis.md before switching).
	HashKeysOver int `mapstructure:"hash_keys_over"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (Sentinel only); Username and Password are the data servers'.
	SentinelUsername string `mapstructure:"sentinel_username"`
	SentinelPassword string `mapstructure:"sentinel_password"`
}

// Redis is the Store on Redis (standalone, Sentinel or Cluster).
//
// A key's whole state lives in one string value, "inflight:<token>" or
// "done:<token>", whose expiry is the lease or the done TTL. Every
// transition is one command on that single key — a conditional SET, or a
// Lua script, which Redis runs atomically — and a single key keeps it
// valid on Cluster.
//
// Every method is idempotent for the same arguments, so go-redis' automatic
// retry after a lost reply cannot change the outcome.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	owned  bool
	batch  *rediscoalesce.Coalescer
	master string   // Sentinel master set name, to name it in Durability
	addrs  []string // as configured, for Describe
	// hashOver > 0: keys longer than that are stored hashed (stored).
	hashOver int
	// scriptsOnly is set once Redis refused SET … GET (before 7.0 NX and
	// GET do not combine): claims and commits then run as scripts.
	scriptsOnly atomic.Bool
	// pxLease and pxTTL are the last lease and TTL in milliseconds as
	// text: one per process in practice, formatted once, not per command.
	pxLease, pxTTL atomic.Pointer[pxText]
}

type pxText struct {
	d time.Duration
	s string
}

// px is millis(d), kept in last.
func px(last *atomic.Pointer[pxText], d time.Duration) string {
	if t := last.Load(); t != nil && t.d == d {
		return t.s
	}
	t := &pxText{d: d, s: millis(d)}
	last.Store(t)
	return t.s
}

var _ BatchStore = (*Redis)(nil)

// NewRedis creates a client from o. It does not contact Redis: a sidecar must
// be able to start while Redis is down and report it through Ping
// (readiness) rather than crash-loop. Close closes the client.
func NewRedis(o RedisOptions) (*Redis, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("seenset: redis: no address given")
	}
	for _, a := range o.Addrs {
		if a == "" {
			return nil, errors.New("seenset: redis: empty address")
		}
	}
	if o.DialTimeout < 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0 || o.PoolSize < 0 || o.WaitReplicas < 0 {
		return nil, errors.New("seenset: redis: timeouts, pool size and wait replicas must not be negative")
	}
	if o.HashKeysOver != 0 && o.HashKeysOver < HashedKeyLen {
		return nil, fmt.Errorf("seenset: redis: keys may be hashed only when longer than %d bytes, the hashed form's length", HashedKeyLen)
	}
	if o.WaitReplicas > 0 && o.WaitTimeout < time.Millisecond {
		// WAIT n 0 blocks for ever.
		return nil, errors.New("seenset: redis: a replica wait needs a wait timeout of at least 1ms")
	}
	c, err := redisconn.New(o.Conn())
	if err != nil {
		return nil, fmt.Errorf("seenset: redis: %w", err)
	}
	return &Redis{c: c, prefix: o.Prefix, owned: true, batch: rediscoalesce.New(c, batchTimeout(o), o.WaitReplicas, o.WaitTimeout),
		master: o.MasterName, addrs: o.Addrs, hashOver: o.HashKeysOver}, nil
}

// Client is the go-redis client r runs on (doctor reads the server's
// version and topology through it).
func (r *Redis) Client() redis.UniversalClient { return r.c }

// Conn is how o reaches Redis: what NewRedis connects with, and what a
// check of the same Redis (dedupe-proxy doctor) starts from.
func (o RedisOptions) Conn() redisconn.Conn {
	return redisconn.Conn{
		Addrs:            o.Addrs,
		MasterName:       o.MasterName,
		Username:         o.Username,
		Password:         o.Password,
		DB:               o.DB,
		SentinelUsername: o.SentinelUsername,
		SentinelPassword: o.SentinelPassword,
		TLS:              o.TLS,
		DialTimeout:      o.DialTimeout,
		ReadTimeout:      o.ReadTimeout,
		WriteTimeout:     o.WriteTimeout,
		PoolSize:         o.PoolSize,
		// Without this go-redis ignores the caller's deadline and waits out
		// ReadTimeout; the pipeline bounds each store call by its context.
		ContextTimeoutEnabled: true,
	}
}

// NewRedisWithClient wraps a client the caller already has (shared pool,
// custom hooks, tests). The caller keeps ownership: Close does not close c,
// because other users of c would break.
func NewRedisWithClient(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix, batch: rediscoalesce.New(c, 5*time.Second, 0, 0)}
}

// HashedKeyLen is the length of a hashed key: "#" and 43 characters of
// base64url SHA-256.
const HashedKeyLen = 44

// stored is the Redis key of key: the prefix and the key itself, or its
// hashed form when it is longer than hashOver. Every key the proxy
// stores has a ":" ("<consumer>:<key space>:<key>") and base64url has
// none, so a hashed form never equals a key kept as it is; SHA-256 makes
// two long keys sharing one form a practical impossibility.
func (r *Redis) stored(key string) string {
	if r.hashOver > 0 && len(key) > r.hashOver {
		sum := sha256.Sum256([]byte(key))
		return r.prefix + "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return r.prefix + key
}

// batchTimeout bounds one pipelined batch: the write and the read of every
// reply in it.
func batchTimeout(o RedisOptions) time.Duration {
	d := o.WriteTimeout + o.ReadTimeout
	if d <= 0 {
		return 6 * time.Second
	}
	return d
}

// Script replies. Small integers rather than strings keep the reply cheap
// and the mapping in one place.
const (
	replyOK       = 1
	replyNotOwner = 0
	replyDup      = 2
	replyBusy     = 3
	replyReused   = 4
)

// Every script reads the value first and refuses to touch a value it does
// not recognise: a foreign value under our prefix is a configuration error,
// and overwriting it would hide that.
const luaParse = `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 9) ~= 'inflight:' and string.sub(v, 1, 5) ~= 'done:' then
  return redis.error_reply('seenset: unexpected value under key')
end
`

// luaDigest is TokenDigest.
const luaDigest = `
local function digest(t)
  if #t >= 24 and string.sub(t, -23, -23) == '/' then
    return string.sub(t, -22)
  end
  return ''
end
`

// KEYS[1] key, ARGV[1] token, ARGV[2] lease ms.
var claimScript = redis.NewScript(luaDigest + luaParse + `
if not v then
  redis.call('SET', KEYS[1], 'inflight:' .. ARGV[1], 'PX', ARGV[2])
  return 1
end
if string.sub(v, 1, 5) == 'done:' then
  local held, mine = digest(string.sub(v, 6)), digest(ARGV[1])
  if held ~= '' and mine ~= '' and held ~= mine then
    return 4
  end
  return 2
end
if v == 'inflight:' .. ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 3
`)

// KEYS[1] key, ARGV[1] token, ARGV[2] lease ms.
var renewScript = redis.NewScript(luaParse + `
if v == 'inflight:' .. ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// KEYS[1] key, ARGV[1] token, ARGV[2] ttl ms. The same transition as the
// plain SET … GET of Commit, for a Redis that cannot combine them.
var commitScript = redis.NewScript(luaParse + `
redis.call('SET', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[2])
if (not v) or v == 'inflight:' .. ARGV[1] or v == 'done:' .. ARGV[1] then
  return 1
end
return 0
`)

// KEYS[1] key, ARGV[1] token.
var releaseScript = redis.NewScript(luaParse + `
if not v then
  return 1
end
if v == 'inflight:' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// Value and PTTL in one script so the TTL belongs to the value read.
// KEYS[1] key.
var statusScript = redis.NewScript(luaParse + `
if not v then
  return {}
end
return {v, redis.call('PTTL', KEYS[1])}
`)

// The common path is two plain commands per forwarded message and no
// script: a claim is SET key inflight:<token> NX PX <lease> GET, whose
// reply is the value it found (nil: it set the key, claimed), and a
// commit is SET key done:<token> PX <ttl> GET. Redis runs a plain SET
// for a fraction of a script's cost. The scripts remain for the rare
// transitions (renew, release, a claim retried under its own token) and
// for a Redis older than 7.0.

// Claim: see Store.
func (r *Redis) Claim(ctx context.Context, key, token string, lease time.Duration) (ClaimResult, error) {
	if err := validateArgs(key, token, lease); err != nil {
		return 0, err
	}
	if !r.scriptsOnly.Load() {
		c := r.claimCmd(key, token, lease)
		err := r.batch.Run(ctx, &c.call)
		if !r.refusedSetGet(err) {
			if err != nil {
				return 0, unavailable(ctx, err)
			}
			return r.claimFound(ctx, key, token, lease, c.call.Val, c.call.Absent)
		}
	}
	return r.claimByScript(ctx, key, token, lease)
}

// setCmd is one SET … GET of a claim or a commit in one allocation: the
// coalescer's call, its arguments and the strings they point at. go-redis
// writes a *string argument as the string, and a pointer needs no
// allocation to go into an any where a string does; so the command costs
// two allocations (this and its key and value, built as one string)
// where a []any of strings cost eight, and a batch claim or commit makes
// one per message. Run through the coalescer as call.
type setCmd struct {
	call     rediscoalesce.Call
	key, val string
	px       string
	argv     [7]any
}

// claimCmd is SET key inflight:token NX PX lease GET.
func (r *Redis) claimCmd(key, token string, lease time.Duration) *setCmd {
	c := &setCmd{px: px(&r.pxLease, lease)}
	c.key, c.val = r.storedWith(key, "inflight:", token)
	c.argv = [7]any{"SET", &c.key, &c.val, "NX", "PX", &c.px, "GET"}
	c.call.Cmd = c.argv[:7]
	c.call.OftenNil = true // nil: the key was free, and now is ours
	return c
}

// commitCmd is SET key done:token PX ttl GET.
func (r *Redis) commitCmd(key, token string, ttl time.Duration) *setCmd {
	c := &setCmd{px: px(&r.pxTTL, ttl)}
	c.key, c.val = r.storedWith(key, "done:", token)
	c.argv = [7]any{"SET", &c.key, &c.val, "PX", &c.px, "GET"}
	c.call.Cmd = c.argv[:6]
	return c
}

// storedWith is stored(key) and tag+token, made as one string when the
// key is kept as it is.
func (r *Redis) storedWith(key, tag, token string) (string, string) {
	if r.hashOver > 0 && len(key) > r.hashOver {
		return r.stored(key), tag + token
	}
	both := r.prefix + key + tag + token
	n := len(r.prefix) + len(key)
	return both[:n], both[n:]
}

func (r *Redis) claimByScript(ctx context.Context, key, token string, lease time.Duration) (ClaimResult, error) {
	n, err := r.runInt(ctx, claimScript, key, token, millis(lease))
	if err != nil {
		return 0, err
	}
	return claimResult(n)
}

// claimFound decides a claim from the value SET NX GET found.
func (r *Redis) claimFound(ctx context.Context, key, token string, lease time.Duration, old string, absent bool) (ClaimResult, error) {
	switch {
	case absent:
		return Claimed, nil
	case strings.HasPrefix(old, "done:"):
		if reused(old[len("done:"):], token) {
			return Reused, nil
		}
		return Duplicate, nil
	case old == "inflight:"+token:
		// Our own claim, retried after a lost reply: it is ours, and its
		// lease starts again, as the script does.
		return r.claimByScript(ctx, key, token, lease)
	case strings.HasPrefix(old, "inflight:"):
		return Busy, nil
	}
	return 0, fmt.Errorf("%w: seenset: unexpected value under key", ErrKeyUnusable)
}

// commitFound decides a commit from the value SET GET replaced.
func commitFound(token, old string, absent bool) error {
	switch {
	case absent, old == "inflight:"+token, old == "done:"+token:
		return nil
	case strings.HasPrefix(old, "inflight:"), strings.HasPrefix(old, "done:"):
		return ErrNotOwner
	}
	return fmt.Errorf("%w: seenset: unexpected value under key (overwritten by the commit)", ErrKeyUnusable)
}

// refusedSetGet reports a Redis that does not know SET … NX … GET, and
// switches to the scripts for good.
func (r *Redis) refusedSetGet(err error) bool {
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "syntax error") {
		return false
	}
	r.scriptsOnly.Store(true)
	return true
}

func claimResult(n int64) (ClaimResult, error) {
	switch n {
	case replyOK:
		return Claimed, nil
	case replyDup:
		return Duplicate, nil
	case replyBusy:
		return Busy, nil
	case replyReused:
		return Reused, nil
	}
	return 0, unexpectedReply(n)
}

// ClaimMany sends every claim in one pipeline, on the caller's goroutine:
// the items are known together, so there is nothing to wait for.
func (r *Redis) ClaimMany(ctx context.Context, items []KeyToken, lease time.Duration) []ClaimReply {
	out := make([]ClaimReply, len(items))
	if !r.scriptsOnly.Load() {
		res := r.runMany(ctx, nil, r.claimCmd, items, lease)
		if !r.refusedSetGet(firstErr(res)) {
			for i, rep := range res {
				out[i].Err = rep.err
				if rep.err == nil {
					out[i].Result, out[i].Err = r.claimFound(ctx, items[i].Key, items[i].Token, lease, rep.val, rep.absent)
				}
			}
			return out
		}
	}
	for i, res := range r.runMany(ctx, claimScript, nil, items, lease) {
		out[i].Err = res.err
		if res.err == nil {
			out[i].Result, out[i].Err = claimResult(res.n)
		}
	}
	return out
}

// CommitMany sends every commit in one pipeline.
func (r *Redis) CommitMany(ctx context.Context, items []KeyToken, ttl time.Duration) []error {
	out := make([]error, len(items))
	if !r.scriptsOnly.Load() {
		res := r.runMany(ctx, nil, r.commitCmd, items, ttl)
		if !r.refusedSetGet(firstErr(res)) {
			for i, rep := range res {
				out[i] = rep.err
				if rep.err == nil {
					out[i] = commitFound(items[i].Token, rep.val, rep.absent)
				}
			}
			return out
		}
	}
	for i, res := range r.runMany(ctx, commitScript, nil, items, ttl) {
		out[i] = res.err
		if res.err == nil {
			out[i] = ownedResult(res.n)
		}
	}
	return out
}

type reply struct {
	n      int64
	val    string
	absent bool
	err    error // translated: ErrInvalid*, ErrUnavailable, ErrKeyUnusable
}

func firstErr(rs []reply) error {
	for _, r := range rs {
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// runMany runs, for every valid item in one pipelined batch, the script
// s or, when s is nil, the plain command cmd builds; an invalid item gets
// its validation error and no call.
func (r *Redis) runMany(ctx context.Context, s *redis.Script, cmd func(key, token string, d time.Duration) *setCmd, items []KeyToken, d time.Duration) []reply {
	out := make([]reply, len(items))
	calls := make([]*rediscoalesce.Call, len(items))
	live := make([]*rediscoalesce.Call, 0, len(items))
	ms := millis(d)
	for i, it := range items {
		if out[i].err = validateArgs(it.Key, it.Token, d); out[i].err != nil {
			continue
		}
		if s == nil {
			calls[i] = &cmd(it.Key, it.Token, d).call
		} else {
			calls[i] = &rediscoalesce.Call{Script: s, Keys: []string{r.stored(it.Key)}, Args: []any{it.Token, ms}}
		}
		live = append(live, calls[i])
	}
	gone := r.batch.DoMany(ctx, live)
	j := 0
	for i, c := range calls {
		if c == nil {
			continue
		}
		err := gone[j]
		j++
		if err == nil {
			out[i].n, out[i].val, out[i].absent = c.N, c.Val, c.Absent
			err = c.Err
		}
		if err != nil {
			out[i].err = unavailable(ctx, err)
		}
	}
	return out
}

func (r *Redis) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	if err := validateArgs(key, token, lease); err != nil {
		return err
	}
	return r.runOwned(ctx, renewScript, key, token, millis(lease))
}

// Commit: see Store. One plain SET … GET; the old value it returns says
// whose the key was.
func (r *Redis) Commit(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := validateArgs(key, token, ttl); err != nil {
		return err
	}
	if !r.scriptsOnly.Load() {
		c := r.commitCmd(key, token, ttl)
		err := r.batch.Run(ctx, &c.call)
		if !r.refusedSetGet(err) {
			if err != nil {
				return unavailable(ctx, err)
			}
			return commitFound(token, c.call.Val, c.call.Absent)
		}
	}
	return r.runOwned(ctx, commitScript, key, token, millis(ttl))
}

func (r *Redis) Release(ctx context.Context, key, token string) error {
	if err := validateKeyToken(key, token); err != nil {
		return err
	}
	return r.runOwned(ctx, releaseScript, key, token)
}

func (r *Redis) Forget(ctx context.Context, key string) (bool, error) {
	if err := validateKey(key); err != nil {
		return false, err
	}
	n, err := r.c.Del(ctx, r.stored(key)).Result()
	if err != nil {
		return false, unavailable(ctx, err)
	}
	return n > 0, nil
}

func (r *Redis) Status(ctx context.Context, key string) (Status, error) {
	if err := validateKey(key); err != nil {
		return Status{}, err
	}
	res, err := statusScript.Run(ctx, r.c, []string{r.stored(key)}).Slice()
	if err != nil {
		return Status{}, unavailable(ctx, err)
	}
	if len(res) == 0 {
		return Status{State: Absent}, nil
	}
	if len(res) != 2 {
		return Status{}, fmt.Errorf("%w: unexpected status reply %v", ErrUnavailable, res)
	}
	v, ok1 := res[0].(string)
	pttl, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return Status{}, fmt.Errorf("%w: unexpected status reply %v", ErrUnavailable, res)
	}
	st := Status{}
	if pttl > 0 {
		st.TTL = time.Duration(pttl) * time.Millisecond
	}
	switch {
	case len(v) >= len("inflight:") && v[:len("inflight:")] == "inflight:":
		st.State, st.Token = Inflight, v[len("inflight:"):]
	case len(v) >= len("done:") && v[:len("done:")] == "done:":
		st.State, st.Token = Done, v[len("done:"):]
	default:
		// The script already rejects this; kept so a script change cannot
		// silently report garbage.
		return Status{}, fmt.Errorf("%w: unexpected value %q", ErrUnavailable, v)
	}
	return st, nil
}

func (r *Redis) Ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return unavailable(ctx, err)
	}
	return nil
}

// Close stops the batcher and closes the client only when NewRedis
// created it.
func (r *Redis) Close() error {
	r.batch.Close()
	if !r.owned {
		return nil
	}
	if err := r.c.Close(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

func (r *Redis) runInt(ctx context.Context, s *redis.Script, key string, args ...any) (int64, error) {
	n, err := r.batch.Do(ctx, s, []string{r.stored(key)}, args...)
	if err != nil {
		return 0, unavailable(ctx, err)
	}
	return n, nil
}

// runOwned runs a script that answers replyOK or replyNotOwner.
func (r *Redis) runOwned(ctx context.Context, s *redis.Script, key string, args ...any) error {
	n, err := r.runInt(ctx, s, key, args...)
	if err != nil {
		return err
	}
	return ownedResult(n)
}

func ownedResult(n int64) error {
	switch n {
	case replyOK:
		return nil
	case replyNotOwner:
		return ErrNotOwner
	}
	return unexpectedReply(n)
}

// millis rounds up, so a positive sub-millisecond duration becomes 1 ms
// rather than PX 0, which Redis rejects.
func millis(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms), 10)
}

// unavailable translates a driver error. The driver error is formatted, not
// wrapped, so callers cannot come to depend on go-redis types (redis.Nil
// above all). The context's own error is wrapped when it ended, so a caller
// that is shutting down can tell its cancellation from an outage.
func unavailable(ctx context.Context, err error) error {
	if keyUnusable(err) {
		return fmt.Errorf("%w: %v", ErrKeyUnusable, err)
	}
	if sentinelAuthRefused(err) {
		return fmt.Errorf("%w: the sentinels refused the credentials: set seenset.redis.sentinel_password (and sentinel_username for an ACL user) to what they require: %s",
			ErrUnavailable, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w (%v)", ErrUnavailable, cerr, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// sentinelAuthRefused recognises sentinels that refused the client's
// credentials (none given: NOAUTH; wrong ones: WRONGPASS), which go-redis
// reports as "all sentinels … are unreachable", hiding the cause.
func sentinelAuthRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "all sentinels") && (strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS"))
}

// keyUnusable recognises the two answers that say this one key is
// unusable while Redis is fine: a key of another type (WRONGTYPE, from the
// script's GET) and a string our scripts refuse to touch.
func keyUnusable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "seenset: unexpected value under key")
}

func unexpectedReply(n int64) error {
	return fmt.Errorf("%w: unexpected script reply %d", ErrUnavailable, n)
}
