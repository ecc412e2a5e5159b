package configs

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// YAML returns the effective configuration as YAML, for logs and `sluice validate`: every key
// with its value after defaults and environment overrides, durations and sizes in their
// written forms ("100ms", "256MiB"), keys in the order of the structs above. The result parses
// back to an equal Config, so it does not mask secrets (kafka.sasl, kafka.tls.key_file): never
// print or log it; print Explain's settings where a configuration is shown. The returned bytes are new and owned by the caller.
func (c *Config) YAML() ([]byte, error) {
	n, err := toNode(reflect.ValueOf(c).Elem(), false)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("configs: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("configs: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// toNode renders v; flow asks for the compact {a: b} / [a, b] style.
func toNode(v reflect.Value, flow bool) (*yaml.Node, error) {
	style := yaml.Style(0)
	if flow {
		style = yaml.FlowStyle
	}
	switch v.Type() {
	case durationType:
		return scalar("!!str", fmtDuration(time.Duration(v.Int()))), nil
	case sizeType:
		return scalar("!!str", Size(v.Int()).String()), nil
	}
	switch v.Kind() {
	case reflect.String:
		return scalar("!!str", v.String()), nil
	case reflect.Int, reflect.Int16, reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool())), nil
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Style: style}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			key := f.Tag.Get("koanf")
			if key == "" || (f.Type.Kind() == reflect.Pointer && v.Field(i).IsNil()) {
				continue
			}
			if v.Type() == operatorType && key == "output" && v.Field(i).String() == "" {
				continue // an operator without a sink
			}
			if (key == "group_by" && v.Field(i).String() == "") || (key == "tables" && v.Field(i).Len() == 0) ||
				(v.Type() == mapType && (key == "set" || key == "select") && v.Field(i).Len() == 0) ||
				(v.Type() == joinType && key == "select" && v.Field(i).Len() == 0) ||
				(key == "window_finals" && v.Field(i).Kind() == reflect.Slice && v.Field(i).Len() == 0) {
				continue // optional, and absent
			}
			val, err := toNode(v.Field(i), flow)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, scalar("!!str", key), val)
		}
		return n, nil
	case reflect.Pointer:
		return toNode(v.Elem(), flow)
	case reflect.Slice:
		elemFlow := flow || v.Type().Elem().Kind() == reflect.String
		n := &yaml.Node{Kind: yaml.SequenceNode}
		if elemFlow {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			item, err := toNode(v.Index(i), elemFlow)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, item)
		}
		return n, nil
	case reflect.Map:
		// Aggregate field specs print in flow style: {sum: amount}.
		ek := v.Type().Elem().Kind()
		elemFlow := flow || ek == reflect.Map || ek == reflect.Interface
		n := &yaml.Node{Kind: yaml.MappingNode, Style: style}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		for _, k := range keys {
			item, err := toNode(v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())), elemFlow)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, scalar("!!str", k), item)
		}
		return n, nil
	case reflect.Interface:
		if v.IsNil() { // {count: } prints as {count: {}}
			return &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}, nil
		}
		n := &yaml.Node{}
		if err := n.Encode(v.Interface()); err != nil {
			return nil, fmt.Errorf("configs: marshal: %w", err)
		}
		if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
			n.Style = yaml.FlowStyle
		}
		return n, nil
	}
	return nil, fmt.Errorf("configs: marshal: unsupported type %s", v.Type())
}

var (
	operatorType = reflect.TypeFor[Operator]()
	mapType      = reflect.TypeFor[Map]()
	joinType     = reflect.TypeFor[Join]()
)

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}
