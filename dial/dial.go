// Package dial owns how sluice connects to Kafka: Opts turns the kafka section of the
// configuration (seed brokers, kafka.tls, kafka.sasl) into the franz-go options that every
// client sluice makes starts from: the group consumer and transactional producer (which also
// writes the sinks, changelogs and dead letters), the admin client (topic checks, offsets, the
// purge of repartition topics), the changelog restore clients and `sluice reset`'s client. No
// package builds a kgo.Client without them.
//
// Secrets (the SASL password, the private key) are read here, once, and held only inside the
// returned options: nothing in this package logs, and no error it returns quotes a file's
// content or a password.
package dial

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-dev/sluice/configs"
)

// Opts returns the connection options of k: the seed brokers, then TLS and SASL when they are
// configured. It reads kafka.tls's files and kafka.sasl.password_file; an unreadable or
// malformed file is a *configs.Error naming its key. k must have passed Validate (for
// kafka.brokers: [embedded], the in-process broker's addresses must be in k.Brokers by now).
//
// The returned slice is new and owned by the caller; append a client's own options after it.
// Its options may be shared by any number of clients: they are read-only once built.
func Opts(k configs.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.TLS.Enabled {
		tc, err := TLSConfig(k.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if k.SASL.Mechanism != "" {
		m, err := Mechanism(k.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// Cleartext reports whether k sends a password the network can read: SASL PLAIN without TLS
// (a SASL_PLAINTEXT listener). sluice allows it and warns.
func Cleartext(k configs.Kafka) bool {
	return k.SASL.MechanismName() == configs.SASLPlain && !k.TLS.Enabled
}

// Describe says how k connects, for error messages: "TLS with a client certificate, SASL
// scram-sha-256", "plaintext". It names no user, file or password.
func Describe(k configs.Kafka) string {
	var parts []string
	switch {
	case k.TLS.Enabled && k.TLS.CertFile != "":
		parts = append(parts, "TLS with a client certificate")
	case k.TLS.Enabled:
		parts = append(parts, "TLS")
	default:
		parts = append(parts, "plaintext")
	}
	if k.SASL.Mechanism != "" {
		parts = append(parts, "SASL "+k.SASL.MechanismName())
	}
	return strings.Join(parts, ", ")
}

// Refused reports whether err is about the connection's security rather than the network or
// the request: SASL authentication failed or was not expected, a TLS handshake failed (either
// side rejected the other's certificate), or one side speaks TLS or SASL and the other not.
func Refused(err error) bool {
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.IllegalSaslState) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) {
		return true
	}
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		header  tls.RecordHeaderError
		eof     *kgo.ErrFirstReadEOF
		op      *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid),
		errors.As(err, &header), errors.As(err, &eof):
		return true
	case errors.As(err, &op) && op.Op == "remote error": // a TLS alert: the broker rejects our certificate
		return true
	}
	// A plaintext client reading a TLS alert as the size of a response (kgo has no type for it).
	return strings.Contains(err.Error(), "is this a plaintext connection speaking to a tls endpoint")
}

// TLSConfig returns the TLS configuration of t (which must be enabled): TLS 1.2 or later, the
// brokers verified against ca_file (or the system's roots), the client certificate of
// cert_file and key_file if given. franz-go sets ServerName to each broker's host when
// server_name is empty. The returned config is new and owned by the caller.
func TLSConfig(t configs.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &configs.Error{Key: "kafka.tls.ca_file", Msg: err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &configs.Error{Key: "kafka.tls.ca_file", Msg: fmt.Sprintf("%s holds no PEM certificate", t.CAFile)}
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		certPEM, err := os.ReadFile(t.CertFile)
		if err != nil {
			return nil, &configs.Error{Key: "kafka.tls.cert_file", Msg: err.Error()}
		}
		keyPEM, err := os.ReadFile(t.KeyFile)
		if err != nil {
			return nil, &configs.Error{Key: "kafka.tls.key_file", Msg: err.Error()}
		}
		// X509KeyPair's errors name the input at fault ("certificate input", "key input", "does
		// not match") and never quote it.
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			key := "kafka.tls.key_file"
			if strings.Contains(err.Error(), "certificate") && !strings.Contains(err.Error(), "match") {
				key = "kafka.tls.cert_file"
			}
			return nil, &configs.Error{Key: key, Msg: fmt.Sprintf("%s and %s: %v", t.CertFile, t.KeyFile, err)}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Mechanism returns the SASL mechanism of s (which must have one), with its password read from
// password_file if that is set.
func Mechanism(s configs.SASL) (sasl.Mechanism, error) {
	pass := s.Password
	if s.PasswordFile != "" {
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, &configs.Error{Key: "kafka.sasl.password_file", Msg: err.Error()}
		}
		pass = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if pass == "" {
			return nil, &configs.Error{Key: "kafka.sasl.password_file", Msg: fmt.Sprintf("%s is empty", s.PasswordFile)}
		}
	}
	switch s.MechanismName() {
	case configs.SASLPlain:
		return plain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
	case configs.SASLScramSHA256:
		return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
	case configs.SASLScramSHA512:
		return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, &configs.Error{Key: "kafka.sasl.mechanism", Msg: fmt.Sprintf("unknown mechanism (allowed: %s, %s, %s)", configs.SASLPlain, configs.SASLScramSHA256, configs.SASLScramSHA512)}
}
