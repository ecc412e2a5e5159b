package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/cmd/sluice/workload"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

// TestSecurity runs the real binary against a real Apache Kafka broker whose every listener but
// the test's own PLAINTEXT one requires TLS or SASL (kafkatest.StartSecureBroker): SSL with a
// client certificate, SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (its password from a
// file), and SASL_PLAINTEXT with SCRAM-SHA-256. Through each, one instance processes a backlog
// and live records exactly once; sluice is given only the secured listener, so a client of its
// own connecting without the credentials could not reach the broker at all. One instance also
// restarts without its state dir and restores from the changelog through the listener. The
// credentials come from environment variables and files; the password and the private key
// must appear in no log line, /status, /metrics or `sluice validate [--explain]` output.
// Then a wrong password per mechanism, an untrusted CA and a missing client certificate each
// make sluice exit non-zero, promptly, saying why.
func TestSecurity(t *testing.T) {
	var pw [8]byte
	if _, err := rand.Read(pw[:]); err != nil {
		t.Fatal(err)
	}
	password := "Pw-" + hex.EncodeToString(pw[:])
	b := kafkatest.StartSecureBroker(t, map[string]string{"sluice": password})
	certs := b.Certs
	keyPEM, err := os.ReadFile(certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{password, strings.Split(string(keyPEM), "\n")[1]} // the key's first base64 line
	passFile := filepath.Join(t.TempDir(), "kafka-password")
	if err := os.WriteFile(passFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tlsEnv := []string{"SLUICE_KAFKA__TLS__ENABLED=true", "SLUICE_KAFKA__TLS__CA_FILE=" + certs.CA}
	mtlsEnv := append(tlsEnv[:2:2], "SLUICE_KAFKA__TLS__CERT_FILE="+certs.ClientCert, "SLUICE_KAFKA__TLS__KEY_FILE="+certs.ClientKey)
	saslEnv := func(mech string) []string {
		return []string{"SLUICE_KAFKA__SASL__MECHANISM=" + mech, "SLUICE_KAFKA__SASL__USERNAME=sluice", "SLUICE_KAFKA__SASL__PASSWORD=" + password}
	}
	with := func(listener string, env ...[]string) []string {
		out := []string{"SLUICE_KAFKA__BROKERS=" + listener}
		for _, e := range env {
			out = append(out, e...)
		}
		return out
	}

	t.Run("listeners", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			env     []string
			restore bool // second run without the state dir: a restore from the changelog
			debug   bool
		}{
			{"ssl client certificate", with(b.SSL, mtlsEnv), false, false},
			{"sasl_ssl plain", with(b.SASLSSL, tlsEnv, saslEnv("plain")), false, false},
			{"sasl_ssl scram-sha-256", with(b.SASLSSL, tlsEnv, saslEnv("scram-sha-256")), false, false},
			{"sasl_ssl scram-sha-512 password file", with(b.SASLSSL, mtlsEnv, []string{"SLUICE_KAFKA__SASL__MECHANISM=SCRAM-SHA-512",
				"SLUICE_KAFKA__SASL__USERNAME=sluice", "SLUICE_KAFKA__SASL__PASSWORD_FILE=" + passFile}), true, true},
			{"sasl_plaintext scram-sha-256", with(b.SASLPlaintext, saslEnv("scram-sha-256")), false, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				start := time.Now()
				first := workload.Spec{Records: 4_000, Keys: 200, Partitions: 4, Seed: 31}
				p := newPipeline(t, b.Plaintext, pipelineOpts{partitions: 4, keys: first.Keys, enterLag: 100_000, exitLag: 100, extraEnv: tc.env})
				if tc.debug {
					p.env = append(p.env, "SLUICE_LOG__LEVEL=debug")
				}
				checkValidate(t, p, secrets)
				if err := p.produce(ctx, first); err != nil {
					t.Fatal(err)
				}
				in := p.newInstance("s0", true)
				in.start()
				p.waitCaughtUp(ctx, 60*time.Second, in)
				checkHTTP(ctx, t, in, secrets)
				in.term()
				specs := []workload.Spec{first}
				if tc.restore {
					if err := os.RemoveAll(in.stateDir); err != nil {
						t.Fatal(err)
					}
					second := workload.Spec{Records: 1_000, Keys: 200, Partitions: 4, Seed: 32}
					if err := p.produce(ctx, second); err != nil {
						t.Fatal(err)
					}
					specs = append(specs, second)
					in.start()
					p.waitCaughtUp(ctx, 60*time.Second, in)
					in.term()
					if lines := in.logLines(2, "state restored"); len(lines) == 0 {
						t.Errorf("the run without a state dir restored nothing")
					}
				}
				p.verify(ctx, p.expected(specs...), in.id)
				checkNoSecret(t, "the log", in.tail(1<<30), secrets)
				if tc.restore {
					// sluice reset's own client (a dry run: it only looks the changelog up).
					cmd := exec.Command(sluiceBin, "reset", "-c", p.cfgPath, "--operator", "totals")
					cmd.Env = childEnv(p, "SLUICE_INSTANCE_ID=s0", "SLUICE_PROCESSING__STATE_DIR="+in.stateDir)
					out, err := cmd.CombinedOutput()
					if err != nil || !strings.Contains(string(out), "-totals-changelog: 4 partitions") {
						t.Errorf("sluice reset (dry run): %v\n%s", err, out)
					}
					checkNoSecret(t, "sluice reset", string(out), secrets)
				}
				t.Logf("%s: %d runs, exact, in %v", tc.name, in.runs, time.Since(start).Round(time.Millisecond))
			})
		}
	})

	t.Run("refused", func(t *testing.T) {
		wrong := func(mech string) []string {
			return []string{"SLUICE_KAFKA__SASL__MECHANISM=" + mech, "SLUICE_KAFKA__SASL__USERNAME=sluice", "SLUICE_KAFKA__SASL__PASSWORD=not-" + password}
		}
		for _, tc := range []struct {
			name string
			env  []string
			want string // in the error line
		}{
			{"plain wrong password", with(b.SASLSSL, tlsEnv, wrong("plain")), "(TLS, SASL plain; check kafka.tls and kafka.sasl): SASL_AUTHENTICATION_FAILED"},
			{"scram-sha-256 wrong password", with(b.SASLSSL, tlsEnv, wrong("scram-sha-256")), "SASL_AUTHENTICATION_FAILED"},
			{"scram-sha-512 wrong password", with(b.SASLPlaintext, wrong("scram-sha-512")), "(plaintext, SASL scram-sha-512; check kafka.tls and kafka.sasl): SASL_AUTHENTICATION_FAILED"},
			{"untrusted ca", with(b.SSL, []string{"SLUICE_KAFKA__TLS__ENABLED=true", "SLUICE_KAFKA__TLS__CA_FILE=" + certs.OtherCA,
				"SLUICE_KAFKA__TLS__CERT_FILE=" + certs.ClientCert, "SLUICE_KAFKA__TLS__KEY_FILE=" + certs.ClientKey}), "certificate signed by unknown authority"},
			{"no client certificate", with(b.SSL, tlsEnv), "(TLS; check kafka.tls and kafka.sasl): remote error: tls: bad certificate"},
			// Mismatches: a listener's protocol other than the client's.
			{"no tls to ssl", with(b.SSL), "is this a plaintext connection speaking to a tls endpoint?"},
			{"tls to plaintext", with(b.Plaintext, tlsEnv), "is TLS misconfigured on the client or the broker?"},
			{"no sasl to sasl_plaintext", with(b.SASLPlaintext), "is SASL missing?"},
			{"sasl to plaintext", with(b.Plaintext, saslEnv("scram-sha-256")), "ILLEGAL_SASL_STATE"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPipeline(t, b.Plaintext, pipelineOpts{partitions: 1, enterLag: 1000, exitLag: 100, extraEnv: tc.env})
				start := time.Now()
				code, logs := runToExit(t, p, 60*time.Second)
				took := time.Since(start)
				if code == 0 {
					t.Fatalf("exit 0 with %s:\n%s", tc.name, logs)
				}
				if !strings.Contains(logs, tc.want) || !strings.Contains(logs, "failed its security handshake") {
					t.Errorf("exit %d, but the log does not say %q:\n%s", code, tc.want, logs)
				}
				checkNoSecret(t, "the log", logs, secrets)
				last := strings.TrimSpace(logs)
				last = last[strings.LastIndexByte(last, '\n')+1:] // main's "sluice: <error>"
				t.Logf("%s: exit %d after %v: %s", tc.name, code, took.Round(time.Millisecond), last)
			})
		}
	})
}

// runToExit runs `sluice run` for p, like instance.start, and returns its exit code and
// stderr once it exits; it fails the test if it is still running after within.
func runToExit(t *testing.T, p *pipeline, within time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, "run", "-c", p.cfgPath)
	cmd.Env = childEnv(p, "SLUICE_INSTANCE_ID=refused", "SLUICE_PROCESSING__STATE_DIR="+filepath.Join(t.TempDir(), "state"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	kafkatest.DieWithTest(cmd)
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice still running after %v:\n%s", within, stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// childEnv is the environment of a sluice child: the test's without its SLUICE_* variables,
// then settings, then p.env.
func childEnv(p *pipeline, settings ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return append(append(env, settings...), p.env...)
}

// checkValidate runs `sluice validate` and `validate --explain` on p's config and environment:
// both succeed, reading the certificate and password files, and print no secret.
func checkValidate(t *testing.T, p *pipeline, secrets []string) {
	t.Helper()
	for _, args := range [][]string{{"validate", "-c", p.cfgPath}, {"validate", "--explain", "-c", p.cfgPath}} {
		cmd := exec.Command(sluiceBin, args...)
		cmd.Env = childEnv(p, "SLUICE_INSTANCE_ID=validate")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[1] == "--explain" && !strings.Contains(string(out), "kafka.sasl") && !strings.Contains(string(out), "kafka.tls.key_file") {
			t.Errorf("validate --explain shows no kafka.sasl or kafka.tls key:\n%s", out)
		}
		checkNoSecret(t, "sluice "+strings.Join(args, " "), string(out), secrets)
	}
}

// checkHTTP reads /status and /metrics of a running instance and looks for the secrets.
func checkHTTP(ctx context.Context, t *testing.T, in *instance, secrets []string) {
	t.Helper()
	in.mu.Lock()
	addr := in.addr
	in.mu.Unlock()
	if addr == "" {
		t.Fatal("no HTTP address logged")
	}
	for _, path := range []string{"/status", "/metrics"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %v, status %d, %d bytes", path, err, resp.StatusCode, len(body))
		}
		checkNoSecret(t, path, string(body), secrets)
	}
}

func checkNoSecret(t *testing.T, where, text string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds a secret (%.6s...)", where, s)
		}
	}
}
