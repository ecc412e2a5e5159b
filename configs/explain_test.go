package configs

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestExplainOrigins(t *testing.T) {
	doc := `
kafka: {brokers: [127.0.0.1:9092]}
group: revenue
backlog: {enter_lag: 1000, exit_lag: }
sources:
  orders: {topic: orders, key: customer_id, watermark: {max_delay: 5s}}
operators:
  - name: per_minute
    aggregate:
      input: orders
      window: {tumbling: 1m}
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
sinks:
  out: {topic: totals}
`
	env := []string{
		"SLUICE_KAFKA__BROKERS=a:9092,b:9092",
		"SLUICE_SOURCES__ORDERS__TOPIC=orders-v2",
		"SLUICE_BACKLOG__SORT_MEMORY=1GiB",
		"SLUICE_TEST_KAFKA=ignored:9092",
	}
	c, settings, err := explain([]byte(doc), "my.yaml", env, func() (string, error) { return "host-0", nil })
	if err != nil {
		t.Fatal(err)
	}
	if c.Sources["orders"].Topic != "orders-v2" {
		t.Fatalf("the environment was not applied: %+v", c.Sources)
	}
	got := map[string]Setting{}
	for _, s := range settings {
		if _, dup := got[s.Key]; dup {
			t.Errorf("key %s listed twice", s.Key)
		}
		got[s.Key] = s
	}
	for _, want := range []Setting{
		{Key: "kafka.brokers", Value: "['a:9092', 'b:9092']", Origin: "SLUICE_KAFKA__BROKERS"},
		{Key: "kafka.transaction_timeout", Value: "2m", Origin: OriginDefault},
		{Key: "group", Value: "revenue", Origin: OriginFile},
		{Key: "instance_id", Value: "host-0", Origin: OriginDefault},
		{Key: "backlog.enter_lag", Value: "1000", Origin: OriginFile},
		{Key: "backlog.exit_lag", Value: "500", Origin: OriginDefault}, // null in the file
		{Key: "backlog.sort_memory", Value: "1GiB", Origin: "SLUICE_BACKLOG__SORT_MEMORY"},
		{Key: "sources.orders.topic", Value: "orders-v2", Origin: "SLUICE_SOURCES__ORDERS__TOPIC"},
		{Key: "sources.orders.key", Value: "customer_id", Origin: OriginFile},
		{Key: "sources.orders.timestamp", Value: `""`, Origin: OriginDefault},
		{Key: "sources.orders.watermark.max_delay", Value: "5s", Origin: OriginFile},
		{Key: "sources.orders.watermark.idle_after", Value: "0s", Origin: OriginDefault},
		{Key: "operators[0].name", Value: "per_minute", Origin: OriginFile},
		{Key: "operators[0].aggregate.fields", Value: "{amount: {sum: amount}, orders: {count: {}}}", Origin: OriginFile},
		{Key: "operators[0].aggregate.emit", Value: "updates", Origin: OriginDefault},
		{Key: "operators[0].aggregate.window.tumbling", Value: "1m", Origin: OriginFile},
		{Key: "operators[0].aggregate.window.grace", Value: "0s", Origin: OriginDefault},
		{Key: "sinks.out.format", Value: "json", Origin: OriginDefault},
	} {
		if g := got[want.Key]; g != want {
			t.Errorf("%s: got %+v, want %+v", want.Key, g, want)
		}
	}
	for _, k := range []string{"operators[0].filter.expr", "operators[0].map.set"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s listed, but the operator has no such section", k)
		}
	}
	// Every leaf key of the loaded config is listed: the walk misses nothing.
	n := 0
	for _, k := range typeKeys(reflect.TypeFor[Config]()) {
		if k.kind == leafKey && !k.inList && !strings.Contains(k.pattern, "<name>") {
			n++
			if _, ok := got[k.pattern]; !ok {
				t.Errorf("%s is not listed", k.pattern)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d plain keys", n)
	}
}

func TestExplainErrorsAreLoadErrors(t *testing.T) {
	_, _, err := explain([]byte("group: g\nbacklog: {enter_lagg: 5}\n"), "", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "backlog.enter_lagg") {
		t.Fatalf("got %v, want an error naming backlog.enter_lagg", err)
	}
	if _, _, err := Explain("/no/such/file.yaml", nil); err == nil || !strings.Contains(err.Error(), "/no/such/file.yaml") {
		t.Fatalf("got %v, want an error naming the file", err)
	}
}

// TestSecretPattern runs a synthetic list of keys through the rule that masks them.
func TestSecretPattern(t *testing.T) {
	for key, want := range map[string]bool{
		"kafka.sasl.password":                 true,
		"kafka.sasl.mechanism":                true, // in the sasl section
		"kafka.sasl_username":                 true,
		"kafka.tls.key_file":                  true,
		"kafka.tls.cert_file":                 false,
		"schema_registry.basic_auth.password": true,
		"schema_registry.bearer_token":        true,
		"schema_registry.url":                 false,
		"aws.secret_access_key":               true,
		"gcp.credentials_json":                true,
		"vault.api_key":                       true,
		"tls.private_key":                     true,
		"tls.passphrase":                      true,
		"sources.<name>.topic":                false, // a source named "tokens" is not a secret
		"sources.<name>.key":                  false,
		"processing.state_dir":                false,
		"operators[].aggregate.fields":        false,
		"sinks.<name>.password":               true,
		"connections[].token":                 true,
		"TOKENS[].url":                        true,
	} {
		if got := secretPattern(key); got != want {
			t.Errorf("secretPattern(%q) = %v, want %v", key, got, want)
		}
	}
	// The secrets of the real configuration: a new one must be masked everywhere it is printed
	// (validate --explain, logs, /status), which the e2e test TestSecurity checks for these.
	want := map[string]bool{
		"kafka.sasl.mechanism": true, "kafka.sasl.username": true, "kafka.sasl.password": true,
		"kafka.sasl.password_file": true, "kafka.tls.key_file": true,
		"schema_registry.password": true, "schema_registry.bearer_token": true,
	}
	if s := secretKeys(reflect.TypeFor[Config]()); !reflect.DeepEqual(s, want) {
		t.Errorf("Config has secret keys %v, want %v: check a new one is masked everywhere it is printed", s, want)
	}
}

// TestExplainMasksSASL loads a real configuration whose password comes from the environment
// and whose key file from the file: --explain shows neither, and says where each came from.
func TestExplainMasksSASL(t *testing.T) {
	doc := strings.Replace(minimalDoc, "kafka: {brokers: [127.0.0.1:9092]}", `kafka:
  brokers: [127.0.0.1:9092]
  tls: {enabled: true, ca_file: /etc/ca.pem, cert_file: /etc/client.pem, key_file: /etc/hunter2-key.pem}
  sasl: {mechanism: SCRAM-SHA-512, username: svc-hunter2}`, 1)
	c, settings, err := explain([]byte(doc), "sluice.yaml", []string{"SLUICE_KAFKA__SASL__PASSWORD=hunter2"}, noHost(t))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "password", c.Kafka.SASL.Password, "hunter2")
	eq(t, "mechanism", c.Kafka.SASL.MechanismName(), SASLScramSHA512)
	got := map[string]Setting{}
	for _, s := range settings {
		got[s.Key] = s
		if strings.Contains(s.Value, "hunter2") {
			t.Errorf("%s shows a secret: %s", s.Key, s.Value)
		}
	}
	eq(t, "password", got["kafka.sasl.password"], Setting{Key: "kafka.sasl.password", Value: Masked, Origin: "SLUICE_KAFKA__SASL__PASSWORD", Secret: true})
	eq(t, "password_file", got["kafka.sasl.password_file"], Setting{Key: "kafka.sasl.password_file", Value: `""`, Origin: OriginDefault, Secret: true})
	eq(t, "key_file", got["kafka.tls.key_file"], Setting{Key: "kafka.tls.key_file", Value: Masked, Origin: OriginFile, Secret: true})
	eq(t, "ca_file", got["kafka.tls.ca_file"], Setting{Key: "kafka.tls.ca_file", Value: "/etc/ca.pem", Origin: OriginFile})

	// A password YAML reads as a number is refused (0x1F would become 31), without its value.
	for _, v := range []string{"0x1F", "1e5", "true", "123456"} {
		bad := strings.Replace(doc, "username: svc-hunter2}", "username: svc, password: "+v+"}", 1)
		_, _, err := explain([]byte(bad), "sluice.yaml", nil, noHost(t))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "kafka.sasl.password" || strings.Contains(err.Error(), "31") || strings.Contains(err.Error(), "100000") || strings.Contains(err.Error(), v) {
			t.Errorf("password: %s: got %v, want an error at kafka.sasl.password that shows no value", v, err)
		}
	}

	// A rejected value in the section is not quoted either.
	bad := strings.Replace(doc, "SCRAM-SHA-512", "hunter2", 1)
	if _, _, err := explain([]byte(bad), "sluice.yaml", nil, noHost(t)); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("got %v, want an error about kafka.sasl.mechanism that does not quote it", err)
	}
}

// TestSettingsMaskSecrets walks a synthetic configuration with secrets.
func TestSettingsMaskSecrets(t *testing.T) {
	type registry struct {
		URL   string `koanf:"url"`
		Token string `koanf:"bearer_token"`
	}
	type vault struct {
		Address string `koanf:"address"`
		Role    string `koanf:"role"`
	}
	type conn struct {
		Name string `koanf:"name"`
		Pass string `koanf:"pass" secret:"true"`
	}
	type synthetic struct {
		Kafka struct {
			Brokers []string `koanf:"brokers"`
			SASL    struct {
				Mechanism string `koanf:"mechanism"`
				Username  string `koanf:"username"`
				Password  string `koanf:"password"`
			} `koanf:"sasl"`
			KeyFile string        `koanf:"key_file"`
			Timeout time.Duration `koanf:"timeout"`
		} `koanf:"kafka"`
		Registries map[string]registry `koanf:"registries"`
		Tokens     map[string]registry `koanf:"tokens"` // the section's name marks every key in it
		Vault      vault               `koanf:"vault" secret:"true"`
		Conns      []conn              `koanf:"conns"`
	}
	var v synthetic
	v.Kafka.Brokers = []string{"a:9092"}
	v.Kafka.SASL.Mechanism = "PLAIN"
	v.Kafka.SASL.Username = "svc"
	v.Kafka.SASL.Password = "hunter2"
	v.Kafka.Timeout = time.Second
	v.Registries = map[string]registry{"tokens": {URL: "http://r", Token: "t0k"}}
	v.Tokens = map[string]registry{"main": {URL: "http://t"}}
	v.Vault = vault{Address: "http://v", Role: "r"}
	v.Conns = []conn{{Name: "c", Pass: "p"}}

	rv := reflect.ValueOf(v)
	o := &origins{file: map[string]any{"kafka": map[string]any{"sasl": map[string]any{"password": "hunter2"}}}, env: envNames{"kafka.sasl.username": "SLUICE_KAFKA__SASL__USERNAME"}}
	settings, err := settingsOf(valueKeys(rv), secretKeys(rv.Type()), o)
	if err != nil {
		t.Fatal(err)
	}
	want := []Setting{
		{Key: "kafka.brokers", Value: "['a:9092']", Origin: OriginDefault},
		{Key: "kafka.sasl.mechanism", Value: Masked, Origin: OriginDefault, Secret: true},
		{Key: "kafka.sasl.username", Value: Masked, Origin: "SLUICE_KAFKA__SASL__USERNAME", Secret: true},
		{Key: "kafka.sasl.password", Value: Masked, Origin: OriginFile, Secret: true},
		{Key: "kafka.key_file", Value: `""`, Origin: OriginDefault, Secret: true}, // empty: nothing to hide
		{Key: "kafka.timeout", Value: "1s", Origin: OriginDefault},
		{Key: "registries.tokens.url", Value: "http://r", Origin: OriginDefault},
		{Key: "registries.tokens.bearer_token", Value: Masked, Origin: OriginDefault, Secret: true},
		{Key: "tokens.main.url", Value: Masked, Origin: OriginDefault, Secret: true},
		{Key: "tokens.main.bearer_token", Value: `""`, Origin: OriginDefault, Secret: true},
		{Key: "vault.address", Value: Masked, Origin: OriginDefault, Secret: true},
		{Key: "vault.role", Value: Masked, Origin: OriginDefault, Secret: true},
		{Key: "conns[0].name", Value: "c", Origin: OriginDefault},
		{Key: "conns[0].pass", Value: Masked, Origin: OriginDefault, Secret: true},
	}
	if !reflect.DeepEqual(settings, want) {
		t.Errorf("got\n%+v\nwant\n%+v", settings, want)
	}
	for _, s := range settings {
		for _, secret := range []string{"hunter2", "t0k", "svc", "PLAIN"} {
			if strings.Contains(s.Value, secret) {
				t.Errorf("%s shows a secret: %s", s.Key, s.Value)
			}
		}
	}
}
