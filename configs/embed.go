package configs

import _ "embed"

// Demo is examples/demo.yaml, the pipeline `sluice demo` runs against an in-process broker.
// It is read-only by convention: parse it with Parse(Demo, environ), never modify it.
//
//go:embed examples/demo.yaml
var Demo []byte
