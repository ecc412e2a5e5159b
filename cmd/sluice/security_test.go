package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/dial"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunTLSSASL runs a pipeline against an in-process broker that requires TLS with a client
// certificate and SCRAM-SHA-512 on every connection, twice: the second run, without its state
// dir, restores from the changelog. A client of sluice built without dial.Opts (the admin
// client, the group session, a restore client) cannot connect, and the run fails. The totals
// must be exact, and the debug log must not hold the password. The real broker's listeners are
// the e2e test TestSecurity's.
func TestRunTLSSASL(t *testing.T) {
	const password = "Pw-in-process-7781"
	certs := kafkatest.NewCerts(t)
	serverCert, err := tls.LoadX509KeyPair(certs.BrokerCert, certs.BrokerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := kafkatest.FakeCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "svc", password))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a run takes about 1 s; a client without the options hangs
	defer cancel()

	stateDir := filepath.Join(t.TempDir(), "state")
	doc := fmt.Sprintf(`
kafka:
  brokers: [%s]
  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}
  sasl: {mechanism: scram-sha-512, username: svc}
group: secure
instance_id: i-0
processing: {commit_interval: 50ms, state_dir: %s}
backlog: {enter_lag: 100, exit_lag: 10, progress_interval: 0s}
http: {listen: "off"}
log: {level: debug}
sources:
  orders: {topic: orders, key: customer_id}
operators:
  - name: totals
    aggregate:
      input: orders
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
sinks:
  out: {topic: totals}
`, c.ListenAddrs()[0], certs.CA, certs.ClientCert, certs.ClientKey, stateDir)
	cfg, err := configs.Parse([]byte(doc), []string{"SLUICE_KAFKA__SASL__PASSWORD=" + password})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial.Opts(cfg.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(conn, kgo.DefaultProduceTopic("orders"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[string][2]int64{}
	for i := range 600 {
		key := fmt.Sprintf("c-%d", i%20)
		w := want[key]
		want[key] = [2]int64{w[0] + int64(i%7+1), w[1] + 1}
		r := &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"customer_id":%q,"amount":%d}`, key, i%7+1)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	var logs syncBuffer
	run := func() {
		t.Helper()
		cfg, err := configs.Parse([]byte(doc), []string{"SLUICE_KAFKA__SASL__PASSWORD=" + password})
		if err != nil {
			t.Fatal(err)
		}
		log := newLogger(cfg, &logs)
		if err := runPipeline(ctx, cfg, log, runOpts{bounded: true}); err != nil {
			t.Fatalf("bounded run: %v\n%s", err, logs.String())
		}
	}
	run()
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	run() // restores every key from the changelog

	got := map[string][2]int64{}
	rd, err := kgo.NewClient(append(conn, kgo.ConsumeTopics("totals"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for idle := 0; idle < 3; {
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := rd.PollFetches(pctx)
		pcancel()
		if fs.NumRecords() == 0 {
			idle++
			continue
		}
		fs.EachRecord(func(r *kgo.Record) {
			var v struct {
				Amount int64 `json:"amount"`
				Orders int64 `json:"orders"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("output %s: %v", r.Value, err)
			}
			got[string(r.Key)] = [2]int64{v.Amount, v.Orders}
		})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("totals\n got %v\nwant %v", got, want)
	}
	out := logs.String()
	if !strings.Contains(out, "state restored") {
		t.Errorf("the second run restored nothing:\n%s", out)
	}
	if strings.Contains(out, password) {
		t.Errorf("the log holds the password")
	}
}

// TestValidateSecrets: sluice validate and validate --explain never print the SASL password
// (from the environment or a file) nor the private key; they read the files as sluice run
// does, so a missing one exits 2 naming its key; SASL PLAIN without TLS gets a warning; the
// HTTP server stays on the loopback interface by default.
func TestValidateSecrets(t *testing.T) {
	const password = "Pw-validate-5521"
	certs := kafkatest.NewCerts(t)
	keyPEM, err := os.ReadFile(certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	keyBody := strings.Split(string(keyPEM), "\n")[1] // a line of the key's base64
	passFile := filepath.Join(t.TempDir(), "password")
	writeFile(t, passFile, password+"\n")
	doc := func(kafka string) string {
		return strings.Replace(explainYAML, "kafka: {brokers: [127.0.0.1:9092]}", "kafka:\n  brokers: [127.0.0.1:9093]\n"+kafka, 1)
	}
	for _, tc := range []struct {
		name, kafka string
		env         []string
		code        int
		want        []string // regular expressions, each matching a line of stdout or stderr
	}{
		{"password from env", fmt.Sprintf("  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}\n  sasl: {mechanism: plain, username: svc}\n", certs.CA, certs.ClientCert, certs.ClientKey),
			[]string{"SLUICE_KAFKA__SASL__PASSWORD=" + password}, 0, []string{
				`^  kafka\.sasl\.password +env SLUICE_KAFKA__SASL__PASSWORD +\*\*\*\*\*\*$`,
				`^  kafka\.tls\.key_file +file +\*\*\*\*\*\*$`,
				`^  kafka\.tls\.ca_file +file +` + regexp.QuoteMeta(certs.CA) + `$`,
				`^  http\.listen +default +127\.0\.0\.1:9464$`,
			}},
		{"password file", fmt.Sprintf("  tls: {enabled: true}\n  sasl: {mechanism: scram-sha-256, username: svc, password_file: %s}\n", passFile),
			nil, 0, []string{`^  kafka\.sasl\.password_file +file +\*\*\*\*\*\*$`}},
		{"plain without tls", "  sasl: {mechanism: plain, username: svc}\n",
			[]string{"SLUICE_KAFKA__SASL__PASSWORD=" + password}, 0, []string{`^warning: kafka\.sasl\.mechanism is plain without kafka\.tls`}},
		{"missing ca file", "  tls: {enabled: true, ca_file: /nonexistent/ca.pem}\n  sasl: {mechanism: plain, username: svc}\n",
			[]string{"SLUICE_KAFKA__SASL__PASSWORD=" + password}, 2, []string{`kafka\.tls\.ca_file: open /nonexistent/ca\.pem: no such file`}},
		{"key of another certificate", fmt.Sprintf("  tls: {enabled: true, cert_file: %s, key_file: %s}\n", certs.BrokerCert, certs.ClientKey),
			nil, 2, []string{`kafka\.tls\.key_file: .*private key does not match public key`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "sluice.yaml")
			writeFile(t, f, doc(tc.kafka))
			for _, kv := range tc.env {
				name, val, _ := strings.Cut(kv, "=")
				t.Setenv(name, val)
			}
			var all strings.Builder
			for _, args := range [][]string{{"validate", "-c", f}, {"validate", "--explain", "-c", f}} {
				var out, errb bytes.Buffer
				if code := realMain(args, &out, &errb); code != tc.code {
					t.Fatalf("%v: exit %d, want %d; stderr %s", args, code, tc.code, errb.String())
				}
				all.WriteString(out.String() + errb.String())
			}
			s := all.String()
			for _, want := range tc.want {
				if !regexp.MustCompile(`(?m)` + want).MatchString(s) {
					t.Errorf("no line matching %q in:\n%s", want, s)
				}
			}
			for _, secret := range []string{password, keyBody} {
				if strings.Contains(s, secret) {
					t.Errorf("the output holds a secret (%.12s...):\n%s", secret, s)
				}
			}
		})
	}
}
