package config

import (
	"crypto/tls"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redisq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// The one mapping from the config to what each source and the seen-set
// take: the proxy, doctor and redrive all build their clients from these,
// so a setting cannot reach one and miss another. Logger and metrics are
// the caller's.

// clientTLS is the TLS of every connection a "tls: true" turns on: the
// system's roots, TLS 1.2 at least.
func clientTLS() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }

// RabbitMQOptions are a rabbitmq source's settings as the source takes
// them.
func (s Source) RabbitMQOptions() rabbitmq.Options {
	r := s.RabbitMQ
	return rabbitmq.Options{
		Name:                 s.Name,
		URL:                  r.URL,
		Queue:                r.Queue,
		Prefetch:             r.Prefetch,
		Workers:              r.Workers,
		ConsumerTag:          r.ConsumerTag,
		ReconnectInitial:     r.ReconnectInitial,
		ReconnectMax:         r.ReconnectMax,
		DeadLetterMode:       r.DeadLetter.Mode,
		DeadLetterExchange:   r.DeadLetter.Exchange,
		DeadLetterRoutingKey: r.DeadLetter.RoutingKey,
		DeadLetterQueue:      r.DeadLetter.Queue,
	}
}

// KafkaOptions are a kafka source's settings as the source takes them.
func (s Source) KafkaOptions() kafka.Options {
	k := s.Kafka
	return kafka.Options{
		Name:              s.Name,
		Brokers:           k.Brokers,
		Topics:            k.Topics,
		Group:             k.Group,
		GroupInstanceID:   k.GroupInstanceID,
		Balancers:         k.Balancers,
		StartOffset:       k.StartOffset,
		IsolationLevel:    k.IsolationLevel,
		Ordering:          k.Ordering,
		MaxInFlight:       k.MaxInFlight,
		ReadAhead:         k.ReadAhead,
		BatchSize:         k.BatchSize,
		CommitInterval:    k.CommitInterval,
		CommitEvery:       k.CommitEvery,
		SessionTimeout:    k.SessionTimeout,
		HeartbeatInterval: k.HeartbeatInterval,
		RebalanceTimeout:  k.RebalanceTimeout,
		DeadLetterTopic:   k.DeadLetterTopic,
		SASL:              kafka.SASL{Mechanism: k.SASL.Mechanism, Username: k.SASL.Username, Password: k.SASL.Password},
		TLS: kafka.TLS{Enabled: k.TLS.Enabled, CAFile: k.TLS.CAFile, CertFile: k.TLS.CertFile,
			KeyFile: k.TLS.KeyFile, InsecureSkipVerify: k.TLS.InsecureSkipVerify},
	}
}

// RedisOptions are a redis source's settings as the source takes them;
// the consumer names the stream's group (every replica of one consumer
// shares the entries, another consumer reads them all).
func (s Source) RedisOptions(consumer string) redisq.Options {
	r := s.Redis
	o := redisq.Options{
		Name:                     s.Name,
		Addrs:                    r.Addrs,
		URL:                      r.URL,
		Username:                 r.Username,
		Password:                 r.Password,
		DB:                       r.DB,
		Queue:                    r.Queue,
		Stream:                   r.Stream,
		Group:                    consumer,
		BodyField:                r.BodyField,
		ClaimIdle:                r.ClaimIdle,
		MaxDeliveries:            r.MaxDeliveries,
		DeadLetter:               r.DeadLetter,
		Workers:                  r.Workers,
		HeartbeatTTL:             r.HeartbeatTTL,
		TakeBabelQueueProcessing: r.TakeBabelQueueProcessing,
		ReconnectInitial:         r.ReconnectInitial,
		ReconnectMax:             r.ReconnectMax,
	}
	if r.TLS {
		o.TLS = clientTLS()
	}
	return o
}

// StoreOptions are the seen-set Redis's settings as the store takes them.
func (r Redis) StoreOptions() seenset.RedisOptions {
	o := seenset.RedisOptions{
		Addrs:            r.Addrs,
		MasterName:       r.MasterName,
		Username:         r.Username,
		Password:         r.Password,
		DB:               r.DB,
		Prefix:           r.Prefix,
		DialTimeout:      r.DialTimeout,
		ReadTimeout:      r.ReadTimeout,
		WriteTimeout:     r.WriteTimeout,
		PoolSize:         r.PoolSize,
		WaitReplicas:     r.WaitReplicas,
		WaitTimeout:      r.WaitTimeout,
		HashKeysOver:     r.HashKeysOver,
		SentinelUsername: r.SentinelUsername,
		SentinelPassword: r.SentinelPassword,
	}
	if r.TLS {
		o.TLS = clientTLS()
	}
	return o
}
