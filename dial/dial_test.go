package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/integration/kafkatest"
)

const password = "hunter2-Zq8"

// ping connects with Opts(k) and returns the broker's answer to a metadata request.
func ping(t *testing.T, k configs.Kafka) error {
	t.Helper()
	opts, err := Opts(k)
	if err != nil {
		t.Fatalf("Opts: %v", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// TestOpts connects to kfake clusters through every combination sluice offers: plaintext, TLS
// with a client certificate (required by the cluster), and SASL PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 over TLS; a wrong password or an untrusted CA is refused. The real broker's
// listeners are the e2e test TestSecurity's.
func TestOpts(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	serverCert, err := tls.LoadX509KeyPair(certs.BrokerCert, certs.BrokerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert}
	mtls := configs.TLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}

	plain := kafkatest.Fake(t, 1)
	if err := ping(t, configs.Kafka{Brokers: []string{plain}}); err != nil {
		t.Errorf("plaintext: %v", err)
	}

	tlsOnly := kafkatest.FakeCluster(t, kfake.NumBrokers(1), kfake.TLS(serverTLS))
	k := configs.Kafka{Brokers: tlsOnly.ListenAddrs(), TLS: mtls}
	if err := ping(t, k); err != nil {
		t.Errorf("tls with a client certificate: %v", err)
	}
	k.TLS.CertFile, k.TLS.KeyFile = "", ""
	if err := ping(t, k); err == nil || !Refused(err) {
		t.Errorf("tls without the client certificate the cluster requires: got %v, want an error Refused knows", err)
	}
	k.TLS = configs.TLS{Enabled: true, CAFile: certs.OtherCA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	if err := ping(t, k); err == nil || !strings.Contains(err.Error(), "certificate") || !Refused(err) {
		t.Errorf("tls trusting another CA: got %v, want a certificate error Refused knows", err)
	}
	if err := ping(t, configs.Kafka{Brokers: tlsOnly.ListenAddrs()}); err == nil || !Refused(err) {
		t.Errorf("plaintext to tls: got %v, want an error Refused knows", err)
	}

	for _, m := range []struct{ config, kafka string }{
		{configs.SASLPlain, "PLAIN"},
		{configs.SASLScramSHA256, "SCRAM-SHA-256"},
		{"SCRAM-SHA-512", "SCRAM-SHA-512"}, // case does not matter
	} {
		t.Run(m.kafka, func(t *testing.T) {
			c := kafkatest.FakeCluster(t, kfake.NumBrokers(1), kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser(m.kafka, "svc", password))
			k := configs.Kafka{Brokers: c.ListenAddrs(), TLS: mtls, SASL: configs.SASL{Mechanism: m.config, Username: "svc", Password: password}}
			if err := ping(t, k); err != nil {
				t.Errorf("right password: %v", err)
			}
			file := filepath.Join(t.TempDir(), "password")
			if err := os.WriteFile(file, []byte(password+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			k.SASL.Password, k.SASL.PasswordFile = "", file
			if err := ping(t, k); err != nil {
				t.Errorf("right password from a file: %v", err)
			}
			k.SASL.Password, k.SASL.PasswordFile = "wrong", ""
			err := ping(t, k)
			if err == nil {
				t.Fatal("wrong password: connected")
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("the error quotes the password: %v", err)
			}
			// kfake closes the connection (EOF) where Kafka answers SASL_AUTHENTICATION_FAILED,
			// which TestSecurity (integration/e2e) checks Refused knows.
		})
	}
}

// TestOptsErrors: unreadable or malformed files are config errors naming their key, quoting
// neither a password nor a key.
func TestOptsErrors(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := write("not.pem", "hunter2 is not PEM\n")
	empty := write("empty", "\n")
	keyPEM, err := os.ReadFile(certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	tlsOn := func(ca, cert, key string) configs.Kafka {
		return configs.Kafka{Brokers: []string{"127.0.0.1:1"}, TLS: configs.TLS{Enabled: true, CAFile: ca, CertFile: cert, KeyFile: key}}
	}
	sasl := func(file string) configs.Kafka {
		return configs.Kafka{Brokers: []string{"127.0.0.1:1"}, SASL: configs.SASL{Mechanism: "plain", Username: "svc", PasswordFile: file}}
	}
	for _, tt := range []struct {
		name string
		k    configs.Kafka
		key  string
		msg  string
	}{
		{"no ca file", tlsOn(filepath.Join(dir, "absent.pem"), "", ""), "kafka.tls.ca_file", "no such file"},
		{"ca not pem", tlsOn(notPEM, "", ""), "kafka.tls.ca_file", "holds no PEM certificate"},
		{"no cert file", tlsOn("", filepath.Join(dir, "absent.pem"), certs.ClientKey), "kafka.tls.cert_file", "no such file"},
		{"no key file", tlsOn("", certs.ClientCert, filepath.Join(dir, "absent.pem")), "kafka.tls.key_file", "no such file"},
		{"cert not pem", tlsOn("", notPEM, certs.ClientKey), "kafka.tls.cert_file", "certificate"},
		{"key not pem", tlsOn("", certs.ClientCert, notPEM), "kafka.tls.key_file", "key"},
		{"key of another cert", tlsOn("", certs.ClientCert, certs.BrokerKey), "kafka.tls.key_file", "does not match"},
		{"no password file", sasl(filepath.Join(dir, "absent")), "kafka.sasl.password_file", "no such file"},
		{"empty password file", sasl(empty), "kafka.sasl.password_file", "is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Opts(tt.k)
			var ce *configs.Error
			if !errors.As(err, &ce) || ce.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want a config error at %s containing %q", err, tt.key, tt.msg)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), string(keyPEM[30:60])) {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
}

// TestPasswordFile: one trailing newline (or CRLF) is dropped, nothing else.
func TestPasswordFile(t *testing.T) {
	for body, want := range map[string]string{
		"pw":       "pw",
		"pw\n":     "pw",
		"pw\r\n":   "pw",
		" pw \n\n": " pw \n",
	} {
		file := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := Mechanism(configs.SASL{Mechanism: "plain", Username: "u", PasswordFile: file})
		if err != nil {
			t.Fatal(err)
		}
		_, first, err := m.Authenticate(t.Context(), "host")
		if err != nil {
			t.Fatal(err)
		}
		if got := string(first); got != "\x00u\x00"+want {
			t.Errorf("file %q: PLAIN message %q, want password %q", body, got, want)
		}
	}
}

func TestCleartext(t *testing.T) {
	for _, tt := range []struct {
		k    configs.Kafka
		want bool
	}{
		{configs.Kafka{SASL: configs.SASL{Mechanism: "PLAIN"}}, true},
		{configs.Kafka{SASL: configs.SASL{Mechanism: "plain"}, TLS: configs.TLS{Enabled: true}}, false},
		{configs.Kafka{SASL: configs.SASL{Mechanism: "scram-sha-256"}}, false},
		{configs.Kafka{}, false},
	} {
		if got := Cleartext(tt.k); got != tt.want {
			t.Errorf("Cleartext(%+v) = %v, want %v", tt.k, got, tt.want)
		}
	}
}

func TestRefusedOthers(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, kerr.UnknownTopicOrPartition, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")} {
		if Refused(err) {
			t.Errorf("Refused(%v) = true", err)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, tt := range []struct {
		k    configs.Kafka
		want string
	}{
		{configs.Kafka{}, "plaintext"},
		{configs.Kafka{TLS: configs.TLS{Enabled: true}}, "TLS"},
		{configs.Kafka{TLS: configs.TLS{Enabled: true, CertFile: "c", KeyFile: "k"}, SASL: configs.SASL{Mechanism: "SCRAM-SHA-512", Username: "svc", Password: password}}, "TLS with a client certificate, SASL scram-sha-512"},
		{configs.Kafka{SASL: configs.SASL{Mechanism: "plain"}}, "plaintext, SASL plain"},
	} {
		if got := Describe(tt.k); got != tt.want {
			t.Errorf("Describe = %q, want %q", got, tt.want)
		}
	}
}
