package configs

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/knadh/koanf/providers/file"
	"go.yaml.in/yaml/v3"
)

// Setting is one key of an effective configuration with its value and where the value came
// from: what `sluice validate --explain` prints. A Setting is a plain value.
type Setting struct {
	Key    string // "backlog.enter_lag", "sources.orders.topic", "operators[2].aggregate.window.tumbling"
	Value  string // as YAML writes it on one line ("100ms", "['a:9092', 'b:9092']", "\"\""); Masked for a secret that is set
	Origin string // OriginFile, OriginDefault, or the name of the environment variable that set it
	Secret bool   // the key holds a secret (its name says so, or its field is tagged secret:"true")
}

// Origins of a Setting other than an environment variable.
const (
	OriginFile    = "file"
	OriginDefault = "default"
)

// Masked stands for the value of a secret that is set.
const Masked = "******"

// origins records which keys the file and the environment set.
type origins struct {
	file map[string]any // the file's keys after normalize
	env  envNames       // dotted key -> environment variable
}

// of returns the origin of leaf key k.
func (o *origins) of(k valueKey) string {
	dotted := make([]string, 0, len(k.segs))
	for _, s := range k.segs {
		if name, ok := s.(string); ok {
			dotted = append(dotted, name)
		} else {
			dotted = nil // a list item: the environment cannot set it
			break
		}
	}
	if name, ok := o.env[strings.Join(dotted, ".")]; ok && dotted != nil {
		return name
	}
	var cur any = o.file
	for _, s := range k.segs {
		switch s := s.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return OriginDefault
			}
			cur = m[s]
		case int:
			l, ok := cur.([]any)
			if !ok || s >= len(l) {
				return OriginDefault
			}
			cur = l[s]
		}
	}
	if cur == nil { // absent, or null in the file: the key kept its default
		return OriginDefault
	}
	return OriginFile
}

// Explain is Load that also returns every key of the effective configuration, in the order of
// the Config struct, with its value and origin; secrets are masked. The returned slice is new
// and owned by the caller. Errors are Load's.
func Explain(path string, environ []string) (*Config, []Setting, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	return explain(b, path, environ, nil)
}

// explain is Explain from bytes, with the host name lookup injectable (nil: os.Hostname).
func explain(yamlDoc []byte, fileName string, environ []string, hostname func() (string, error)) (*Config, []Setting, error) {
	if hostname == nil {
		hostname = os.Hostname
	}
	c, o, err := parseOrigins(yamlDoc, fileName, environ, hostname)
	if err != nil {
		return nil, nil, err
	}
	v := reflect.ValueOf(c).Elem()
	settings, err := settingsOf(valueKeys(v), secretKeys(v.Type()), o)
	if err != nil {
		return nil, nil, err
	}
	return c, settings, nil
}

// settingsOf returns the Setting of each of keys, masking the keys whose patterns are in
// secrets.
func settingsOf(keys []valueKey, secrets map[string]bool, o *origins) ([]Setting, error) {
	out := make([]Setting, 0, len(keys))
	for _, k := range keys {
		s := Setting{Key: k.key, Origin: o.of(k), Secret: secrets[k.pattern]}
		if s.Secret && !k.value.IsZero() {
			s.Value = Masked
		} else {
			val, err := flowYAML(k.value)
			if err != nil {
				return nil, err
			}
			s.Value = val
		}
		out = append(out, s)
	}
	return out, nil
}

// flowYAML writes v as one line of YAML, the way YAML() writes it.
func flowYAML(v reflect.Value) (string, error) {
	n, err := toNode(v, true)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(n); err != nil {
		return "", fmt.Errorf("configs: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("configs: marshal: %w", err)
	}
	// The encoder breaks flow collections and plain scalars longer than 80 columns; a line break
	// there reads as one space.
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " "), nil
}

// readFile reads the config file at path ("" = no file: defaults and environment only).
func readFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := file.Provider(path).ReadBytes()
	if err != nil {
		return nil, &Error{Msg: err.Error(), err: err} // names the path
	}
	return b, nil
}
