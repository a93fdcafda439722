package rabbitmq

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial is the one way the proxy connects to RabbitMQ — the source, its
// redrive, the webhook sink and doctor — so that every connection carries
// the same heartbeat and names itself the same way in the management UI
// ("dedupe-proxy/<name>"). timeout bounds the TCP dial and the handshake
// (0: amqp091-go's 30 s). The error never holds the URL's password.
func Dial(url, name string, timeout time.Duration) (*amqp.Connection, error) {
	cfg := amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Properties: amqp.Table{
			"connection_name": "dedupe-proxy/" + name,
			"product":         "dedupe-proxy",
		},
	}
	if timeout > 0 {
		cfg.Dial = amqp.DefaultDial(timeout)
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return nil, redactErr(err, url)
	}
	return conn, nil
}
