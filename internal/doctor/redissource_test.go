package doctor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/doctor"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Redis sources: a queue key of the wrong type fails, a registered
// replica without a heartbeat and elements in BabelQueue's shared list
// are warnings, a stream's group is described, its lag as unknown when
// Redis cannot tell it (an entry after the group's position deleted).
func TestRedisSources(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer app.Close()
	rdb := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	defer rdb.Close()
	ctx := context.Background()
	bad, good, stream, gaps := testutil.UniqueName("doctor-bad-"), testutil.UniqueName("doctor-good-"), testutil.UniqueName("doctor-stream-"), testutil.UniqueName("doctor-gaps-")
	keys := []string{bad, good, good + ":processing", "{" + good + "}:replicas", "{" + good + "}:processing:ghost", stream, gaps}
	t.Cleanup(func() { rdb.Del(ctx, keys...) })
	rdb.Set(ctx, bad, "x", 0)
	rdb.RPush(ctx, good, "a", "b")
	rdb.RPush(ctx, good+":processing", "left-by-babelqueue")
	rdb.SAdd(ctx, "{"+good+"}:replicas", "ghost")
	rdb.LPush(ctx, "{"+good+"}:processing:ghost", "held")
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"body": "x"}})
	rdb.XGroupCreate(ctx, stream, "doctor", "0")
	for _, id := range []string{"1-0", "2-0", "3-0"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: gaps, ID: id, Values: map[string]any{"body": "x"}})
	}
	rdb.XGroupCreate(ctx, gaps, "doctor", "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "doctor", Consumer: "c", Streams: []string{gaps, ">"}, Count: 1})
	rdb.XDel(ctx, gaps, "3-0")

	c := config.Default()
	c.Consumer = "doctor"
	c.SeenSet.Redis.Addrs = []string{testutil.RedisAddr()}
	c.App.URL = app.URL
	c.Admin.Listen = ""
	src := func(name, mode, key string) config.Source {
		s := config.DefaultSource()
		s.Name, s.Type = name, "redis"
		s.Redis.Addrs = []string{testutil.RedisAddr()}
		s.Redis.Mode = mode
		if mode == "list" {
			s.Redis.Queue = key
		} else {
			s.Redis.Stream = key
		}
		return s
	}
	c.Sources = []config.Source{src("bad", "list", bad), src("good", "list", good), src("events", "stream", stream), src("gaps", "stream", gaps)}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r, _ := run(t, &c)
	has(t, r, doctor.Fail, "redis queue "+bad+" (source bad)", "holds a string, not a list")
	has(t, r, doctor.OK, "redis queue "+good+" (source good)", "a list: 2 waiting; 1 replicas registered, 0 alive, 1 messages reserved")
	has(t, r, doctor.Warn, "redis queue "+good+" (source good)", "1 registered replicas have no heartbeat")
	has(t, r, doctor.Warn, "redis queue "+good+" (source good)", "take_babelqueue_processing: true")
	has(t, r, doctor.OK, "redis stream "+stream+" (source events)", `a stream of 1 entries; group "doctor": 0 consumers, 0 pending, 1 not yet delivered`)
	has(t, r, doctor.OK, "redis stream "+gaps+" (source gaps)", `a stream of 2 entries; group "doctor": 1 consumers, 1 pending, an unknown number not yet delivered`)
	has(t, r, doctor.OK, "redis dead letters (source good)", "none")
}
