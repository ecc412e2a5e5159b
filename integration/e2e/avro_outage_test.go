package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	havro "github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// switchProxy forwards TCP connections to a target while up; while down it refuses them
// (accepts and closes at once) and has cut every open one: a registry that is unreachable.
// Safe for concurrent use.
type switchProxy struct {
	ln     net.Listener
	target string
	mu     struct {
		sync.Mutex
		down  bool
		conns map[net.Conn]struct{}
	}
	wg sync.WaitGroup
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target}
	p.mu.conns = map[net.Conn]struct{}{}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.setDown(true)
		p.wg.Wait()
	})
	return p
}

func (p *switchProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.mu.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.mu.conns[c], p.mu.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.mu.conns, dst)
			delete(p.mu.conns, src)
			p.mu.Unlock()
		}
		go pipe(c, up)
		go pipe(up, c)
	}
}

func (p *switchProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.down = down
	if down {
		for c := range p.mu.conns {
			c.Close()
		}
	}
}

// waitLog waits until instance in has logged msg at least n times in its current run.
func waitLog(t *testing.T, in *instance, msg string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(in.logLines(in.runs, msg)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("instance %s: %q logged fewer than %d times in %v; last lines:\n%s", in.id, msg, n, within, in.tail(20))
		}
		time.Sleep(20 * time.Millisecond) // polling the child's log; bounded by deadline
	}
}

// waitExit waits for instance in to exit on its own and returns its exit code.
func waitExit(t *testing.T, in *instance, within time.Duration) int {
	t.Helper()
	in.mu.Lock()
	r := in.running
	in.mu.Unlock()
	select {
	case <-r.done:
	case <-time.After(within):
		t.Fatalf("instance %s still running after %v; last lines:\n%s", in.id, within, in.tail(20))
	}
	in.mu.Lock()
	in.running = nil
	in.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	if r.err != nil {
		t.Fatalf("instance %s: %v", in.id, r.err)
	}
	return 0
}

// TestAvroRegistryOutage: records are never dead letters because the registry is down. A short
// outage (within retry_timeout) only delays the records whose schema is not cached yet; a long
// one makes sluice exit 1 without committing them, and after a restart with the registry back
// every total is exact and the dead-letter topic is empty.
func TestAvroRegistryOutage(t *testing.T) {
	regURL := registryURL(t)
	u, err := url.Parse(regURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	proxy := newSwitchProxy(t, u.Host)
	proxied := *u
	proxied.Host = proxy.ln.Addr().String()

	brokers := kafkatest.Fake(t, 2)
	first := workload.Spec{Records: 500, Keys: 40, Partitions: 2, Seed: 5}
	second := workload.Spec{Records: 500, Keys: 40, Partitions: 2, Seed: 6}
	p := newPipeline(t, brokers, pipelineOpts{partitions: 2, keys: first.Keys, enterLag: 1 << 40, exitLag: 500})
	cfg, err := os.ReadFile(p.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	src := "orders: {topic: " + p.topic + ", format: json, key: customer_id, timestamp: ts}"
	cfg = []byte(strings.Replace(string(cfg), src, "orders: {topic: "+p.topic+", format: avro, key: customer_id, timestamp: ts}", 1))
	cfg = append(cfg, "schema_registry: {urls: ["+proxied.String()+"], timeout: 2s, retry_timeout: 4s}\n"...)
	if err := os.WriteFile(p.cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}

	// The schemas are registered directly; sluice reaches the registry through the proxy.
	rcl, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	v2 := strings.Replace(orderSchema, `{"name": "note"`, `{"name": "channel", "type": "string", "default": "web"}, {"name": "note"`, 1)
	var ids [2]int
	for i, s := range []string{orderSchema, v2} {
		ss, err := rcl.CreateSchema(ctx, p.topic+"-value", sr.Schema{Schema: s, Type: sr.TypeAvro})
		if err != nil {
			t.Fatalf("registering schema %d: %v", i+1, err)
		}
		ids[i] = ss.ID
	}
	if ids[0] == ids[1] {
		t.Fatalf("both schemas have id %d", ids[0])
	}
	produce := func(s workload.Spec, schema string, id int, extra map[string]any) {
		t.Helper()
		sch := havro.MustParse(schema)
		var h sr.ConfluentHeader
		cl := kafkatest.Client(t, brokers)
		err := workload.ProduceEach(ctx, cl, p.topic, func(fn func(key, value []byte, ts int64) error) error {
			return s.Each(func(key, value []byte, ts int64) error {
				o, err := orderFields(value)
				if err != nil {
					return err
				}
				for k, v := range extra {
					o[k] = v
				}
				body, err := havro.Marshal(sch, o)
				if err != nil {
					return err
				}
				v, _ := h.AppendEncode(nil, id, nil)
				return fn(key, append(v, body...), ts)
			})
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// A short outage: the registry is down when the first record needs schema 1, and back
	// within retry_timeout.
	proxy.setDown(true)
	produce(first, orderSchema, ids[0], nil)
	in := p.newInstance("o0", false)
	in.start()
	waitLog(t, in, "schema registry unavailable, retrying", 2, 60*time.Second)
	proxy.setDown(false)
	p.waitCommitted(ctx, 60*time.Second, false, in)
	in.checkAlive()

	// A long outage: schema 2 is not cached, the registry stays down past retry_timeout.
	proxy.setDown(true)
	produce(second, v2, ids[1], map[string]any{"channel": "app"})
	if code := waitExit(t, in, 60*time.Second); code != 1 {
		t.Fatalf("exit code %d after a registry outage past retry_timeout, want 1", code)
	}
	if lines := in.logLines(in.runs, "schema registry unavailable, retrying"); len(lines) < 2 {
		t.Errorf("the instance did not retry before giving up; last lines:\n%s", in.tail(20))
	}
	t.Logf("exited 1 after the long outage: %s", lastLine(in.tail(5)))

	proxy.setDown(false)
	in.start()
	p.waitCommitted(ctx, 60*time.Second, false, in)
	in.term()
	ends, err := p.admin().ListEndOffsets(ctx, p.group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("dead-letter partition %d has records (end offset %d): a record went there because the registry was down", o.Partition, o.Offset)
		}
	})
	p.verify(ctx, p.expected(first, second), in.id)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
