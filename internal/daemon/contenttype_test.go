package daemon

import (
	"context"
	"mime"
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// jsonOnly answers as Flask 2.3+'s request.json does: 415 unless the
// Content-Type is application/json (a 415 is permanent: dead-lettered).
func jsonOnly(r *testutil.Request, _ int) int {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return http.StatusUnsupportedMediaType
	}
	return http.StatusOK
}

// A JSON body without a content type of its own reaches an app that
// insists on application/json on every source kind; a body that is not
// JSON still goes as application/octet-stream. sources[].content_type
// overrides what the message says.
func TestJSONBodyIsSentAsApplicationJSON(t *testing.T) {
	notJSON := []byte("plain text, not JSON")
	kinds := []struct {
		name string
		// run starts a proxy with mutate applied, sends body (no content
		// type; ct when not "") and returns the proxy and its app.
		run func(t *testing.T, mutate func(*config.Config), body []byte, ct string) (*proxy, *testutil.App)
	}{
		{"rabbitmq", func(t *testing.T, mutate func(*config.Config), body []byte, ct string) (*proxy, *testutil.App) {
			h := newHarness(t, mutate)
			h.app.SetRespond(jsonOnly)
			p := h.start()
			h.rabbit.Publish(h.queue, amqp.Publishing{Body: body, ContentType: ct})
			return p, h.app
		}},
		{"kafka", func(t *testing.T, mutate func(*config.Config), body []byte, ct string) (*proxy, *testutil.App) {
			h := newKafkaHarness(t, 1, mutate)
			h.app.SetRespond(jsonOnly)
			p := h.start()
			// With bq-message-id the key comes from the header and the body
			// is never read for it: the JSON check is the content type's own.
			r := kmsg(0, "", "ct-kafka", "")
			r.Value = body
			r.Headers = []kgo.RecordHeader{{Key: "bq-message-id", Value: []byte("ct-kafka")}}
			if ct != "" {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(ct)})
			}
			h.produce(r)
			return p, h.app
		}},
		{"redis list", func(t *testing.T, mutate func(*config.Config), body []byte, ct string) (*proxy, *testutil.App) {
			// A list element has no content type: ct is not sent.
			h := newRedisHarness(t, testutil.RedisAddr(), mutate)
			h.app.SetRespond(jsonOnly)
			p := h.start()
			h.push(body)
			return p, h.app
		}},
		{"redis stream", func(t *testing.T, mutate func(*config.Config), body []byte, ct string) (*proxy, *testutil.App) {
			h := newRedisStreamHarness(t, mutate)
			h.app.SetRespond(jsonOnly)
			p := h.start()
			if ct != "" {
				if err := h.rq.XAdd(context.Background(), &redis.XAddArgs{Stream: h.queue,
					Values: map[string]any{"body": body, "content-type": ct}}).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				h.xadd("", body)
			}
			return p, h.app
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Run("json", func(t *testing.T) {
				t.Parallel()
				p, app := k.run(t, nil, envelope("ct-json", ""), "")
				testutil.Eventually(t, 15*time.Second, "settled", func() bool { return p.settled(t) == 1 })
				if got := p.result(t, "forwarded"); got != 1 {
					t.Fatalf("forwarded %v, want 1; the app saw %s", got, contentTypes(app))
				}
			})
			t.Run("not json", func(t *testing.T) {
				t.Parallel()
				p, app := k.run(t, nil, notJSON, "")
				testutil.Eventually(t, 15*time.Second, "a request", func() bool { return app.Count() >= 1 })
				if got := app.Requests()[0].Header.Get("Content-Type"); got != "application/octet-stream" {
					t.Errorf("Content-Type %q, want application/octet-stream", got)
				}
				if got := p.result(t, "forwarded"); got != 0 {
					t.Errorf("forwarded %v: the app took a body it refuses", got)
				}
			})
			t.Run("content_type overrides", func(t *testing.T) {
				t.Parallel()
				p, app := k.run(t, func(c *config.Config) { c.Sources[0].ContentType = "application/json; charset=utf-8" },
					notJSON, "text/plain")
				testutil.Eventually(t, 15*time.Second, "settled", func() bool { return p.settled(t) == 1 })
				if got := app.Requests()[0].Header.Get("Content-Type"); got != "application/json; charset=utf-8" || p.result(t, "forwarded") != 1 {
					t.Errorf("Content-Type %q, forwarded %v: want the source's content_type and a 200", got, p.result(t, "forwarded"))
				}
			})
		})
	}
}

func contentTypes(app *testutil.App) []string {
	var out []string
	for _, r := range app.Requests() {
		out = append(out, r.Header.Get("Content-Type"))
	}
	return out
}
