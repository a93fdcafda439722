// Package redisconn builds every go-redis client of the proxy: the
// seen-set's and each Redis source's. One mapping from connection
// settings to go-redis' UniversalOptions gives both the same reach: a
// URL or addresses, one server, a Sentinel set or a Cluster, TLS.
package redisconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Conn is how to reach one Redis deployment. One address is a standalone
// server, several are Cluster seeds, and MasterName selects Sentinel
// (Addrs are then the sentinels), as redis.NewUniversalClient decides;
// URL (redis:// or rediss://) replaces Addrs, Username, Password, DB and
// TLS for one server. Zero durations and PoolSize take go-redis'
// defaults.
type Conn struct {
	Addrs      []string
	URL        string
	MasterName string
	Username   string
	Password   string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (with MasterName only).
	SentinelUsername string
	SentinelPassword string
	DB               int
	// TLS turns on TLS with the system's roots, TLS 1.2 at least.
	TLS          bool
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolSize     int
	// MaxRetries as go-redis takes it: 0 its default, -1 none.
	MaxRetries int
	// ContextTimeoutEnabled makes a command honour its context's
	// deadline instead of waiting out ReadTimeout.
	ContextTimeoutEnabled bool
}

// Universal is c as go-redis takes it.
func (c Conn) Universal() (*redis.UniversalOptions, error) {
	uo := &redis.UniversalOptions{
		Addrs:                 c.Addrs,
		MasterName:            c.MasterName,
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		SentinelUsername:      c.SentinelUsername,
		SentinelPassword:      c.SentinelPassword,
		DialTimeout:           c.DialTimeout,
		ReadTimeout:           c.ReadTimeout,
		WriteTimeout:          c.WriteTimeout,
		PoolSize:              c.PoolSize,
		MaxRetries:            c.MaxRetries,
		ContextTimeoutEnabled: c.ContextTimeoutEnabled,
	}
	if c.TLS {
		uo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.URL != "" {
		ro, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		uo.Addrs = []string{ro.Addr}
		uo.Username, uo.Password, uo.DB, uo.TLSConfig = ro.Username, ro.Password, ro.DB, ro.TLSConfig
	}
	if len(uo.Addrs) == 0 {
		return nil, errors.New("addrs or url must be set")
	}
	return uo, nil
}

// New is the client c describes. It does not contact Redis.
func New(c Conn) (redis.UniversalClient, error) {
	uo, err := c.Universal()
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(uo), nil
}
