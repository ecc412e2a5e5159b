package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/consumer"
)

const manifestDir = "../../deploy/kubernetes"

// k8sObject is one document of a manifest file, as a generic tree.
type k8sObject map[string]any

func (o k8sObject) kind() string { return str(o["kind"]) }
func (o k8sObject) name() string { return str(get(o, "metadata", "name")) }

// get walks a YAML tree by mapping keys; it returns nil where a key is missing.
func get(v any, keys ...string) any {
	if o, ok := v.(k8sObject); ok {
		v = map[string]any(o)
	}
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func list(v any) []map[string]any {
	items, _ := v.([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// readManifests parses every document of a manifest file.
func readManifests(t *testing.T, file string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var objs []k8sObject
	for {
		var doc map[string]any // not k8sObject: the decoder would give nested mappings that type too
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc == nil {
			continue
		}
		o := k8sObject(doc)
		if o.kind() == "" || o.name() == "" || str(o["apiVersion"]) == "" {
			t.Fatalf("%s: a document without apiVersion, kind or metadata.name: %v", file, o)
		}
		objs = append(objs, o)
	}
	return objs
}

func find(objs []k8sObject, kind, name string) k8sObject {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	return nil
}

// secretValue returns a Secret's value for key, from stringData or (base64) data.
func secretValue(t *testing.T, objs []k8sObject, name, key string) string {
	t.Helper()
	s := find(objs, "Secret", name)
	if s == nil {
		t.Fatalf("Secret %s is not in the manifests", name)
	}
	if v, ok := get(s, "stringData", key).(string); ok {
		return v
	}
	t.Fatalf("Secret %s has no stringData key %s", name, key)
	return ""
}

// containerEnv resolves a container's environment as the kubelet would: env values, the pod name
// for fieldRef metadata.name, keys of Secrets and ConfigMaps (envFrom with its prefix, and
// secretKeyRef / configMapKeyRef).
func containerEnv(t *testing.T, objs []k8sObject, c map[string]any, podName string) []string {
	t.Helper()
	var env []string
	for _, from := range list(c["envFrom"]) {
		prefix := str(from["prefix"])
		switch {
		case from["secretRef"] != nil:
			s := find(objs, "Secret", str(get(from, "secretRef", "name")))
			if s == nil {
				t.Fatalf("envFrom names Secret %v, which is not in the manifests", get(from, "secretRef", "name"))
			}
			m, _ := s["stringData"].(map[string]any)
			for k, v := range m {
				env = append(env, prefix+k+"="+str(v))
			}
		case from["configMapRef"] != nil:
			cm := find(objs, "ConfigMap", str(get(from, "configMapRef", "name")))
			m, _ := get(cm, "data").(map[string]any)
			for k, v := range m {
				env = append(env, prefix+k+"="+str(v))
			}
		}
	}
	for _, e := range list(c["env"]) {
		name := str(e["name"])
		var val string
		switch {
		case e["value"] != nil:
			val = str(e["value"])
		case get(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name":
			val = podName
		case get(e, "valueFrom", "secretKeyRef") != nil:
			val = secretValue(t, objs, str(get(e, "valueFrom", "secretKeyRef", "name")), str(get(e, "valueFrom", "secretKeyRef", "key")))
		case get(e, "valueFrom", "configMapKeyRef") != nil:
			val = str(get(find(objs, "ConfigMap", str(get(e, "valueFrom", "configMapKeyRef", "name"))), "data", str(get(e, "valueFrom", "configMapKeyRef", "key"))))
		default:
			t.Fatalf("env %s: unsupported source %v", name, e["valueFrom"])
		}
		env = append(env, name+"="+val)
	}
	return env
}

// served reports whether sluice's HTTP handler serves path p (any status but 404).
func served(t *testing.T, p string) bool {
	t.Helper()
	eng, err := consumer.New(consumer.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	httpHandler(eng, prometheus.NewRegistry(), false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
	return rec.Code != http.StatusNotFound
}

// quantityBytes parses a Kubernetes memory quantity such as 768Mi or 1Gi.
func quantityBytes(t *testing.T, q string) int64 {
	t.Helper()
	for suffix, mult := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v * mult
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: want a number of bytes or Ki/Mi/Gi/Ti", q)
	}
	return v
}

// TestKubernetesManifests checks every workload in deploy/kubernetes that runs sluice: its
// config (the ConfigMap's file with the container's environment on top) passes `sluice
// validate`, each SLUICE_* variable sets a config key, instance_id is the pod name, state_dir is
// on a volume, the probes ask sluice's real endpoints on the port of http.listen, and the memory
// limit and termination grace period leave room for what sluice does.
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	kinds := map[string]bool{}
	for _, file := range files {
		objs := readManifests(t, file)
		for _, o := range objs {
			kind := o.kind()
			if kind != "Deployment" && kind != "StatefulSet" {
				continue
			}
			pod := get(o, "spec", "template", "spec")
			for _, c := range list(get(pod, "containers")) {
				args, _ := c["args"].([]any)
				if len(args) == 0 || args[0] != "run" {
					if env := containerEnv(t, objs, c, "p"); strings.Contains(strings.Join(env, " "), "SLUICE_KAFKA") {
						t.Errorf("%s %s: container %s is not sluice but has SLUICE_ variables", kind, o.name(), c["name"])
					}
					continue
				}
				kinds[kind] = true
				t.Run(filepath.Base(file)+"/"+kind+"/"+o.name(), func(t *testing.T) {
					checkSluiceContainer(t, objs, o, pod, c)
				})
			}
		}
	}
	if !kinds["Deployment"] || !kinds["StatefulSet"] {
		t.Errorf("want a sidecar Deployment and a standalone StatefulSet running sluice, found %v", kinds)
	}
}

func checkSluiceContainer(t *testing.T, objs []k8sObject, workload k8sObject, pod any, c map[string]any) {
	// The config file: -c PATH, mounted from a ConfigMap.
	var cfgPath string
	args, _ := c["args"].([]any)
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			cfgPath = str(args[i+1])
		}
	}
	if cfgPath == "" {
		t.Fatalf("args %v: no -c FILE", args)
	}
	volumes := map[string]map[string]any{}
	for _, v := range list(get(pod, "volumes")) {
		volumes[str(v["name"])] = v
	}
	claims := map[string]bool{}
	for _, v := range list(get(workload, "spec", "volumeClaimTemplates")) {
		claims[str(get(v, "metadata", "name"))] = true
	}
	mountOf := func(p string) (map[string]any, string) { // the mount holding p and p's path in it
		var best map[string]any
		var rel string
		for _, m := range list(c["volumeMounts"]) {
			mp := str(m["mountPath"])
			if r, err := filepath.Rel(mp, p); err == nil && !strings.HasPrefix(r, "..") && (best == nil || len(mp) > len(str(best["mountPath"]))) {
				best, rel = m, r
			}
		}
		return best, rel
	}
	m, rel := mountOf(cfgPath)
	if m == nil {
		t.Fatalf("%s is on no volume mount", cfgPath)
	}
	cmName := str(get(volumes[str(m["name"])], "configMap", "name"))
	cm := find(objs, "ConfigMap", cmName)
	if cm == nil {
		t.Fatalf("%s: volume %v is not a ConfigMap of the manifests", cfgPath, m["name"])
	}
	doc, ok := get(cm, "data", rel).(string)
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cmName, rel)
	}

	// sluice validate, with the container's environment on top.
	podName := workload.name() + "-0"
	if workload.kind() == "Deployment" {
		podName = workload.name() + "-7c9f8d6b5-x2k4q"
	}
	env := containerEnv(t, objs, c, podName)
	dir := t.TempDir()
	file := filepath.Join(dir, path.Base(cfgPath))
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		t.Setenv(name, val)
	}
	var out, errb bytes.Buffer
	if code := realMain([]string{"validate", "-c", file}, &out, &errb); code != 0 {
		t.Fatalf("sluice validate of ConfigMap %s with the container's environment: exit %d: %s", cmName, code, errb.String())
	}
	cfg, settings, err := configs.Explain(file, env)
	if err != nil {
		t.Fatal(err)
	}
	// Every SLUICE_ variable sets a key (a misspelt one would have failed validation; this also
	// catches one that a later variable overrides).
	setBy := map[string]string{}
	for _, s := range settings {
		setBy[s.Origin] = s.Key
	}
	nSluice := 0
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SLUICE_") {
			continue
		}
		nSluice++
		if _, ok := setBy[name]; !ok {
			t.Errorf("environment variable %s sets no config key", name)
		}
	}
	if nSluice == 0 {
		t.Errorf("no SLUICE_ environment variables")
	}

	// instance_id is the pod name, from the downward API.
	if cfg.InstanceID != podName || setBy["SLUICE_INSTANCE_ID"] != "instance_id" {
		t.Errorf("instance_id = %q, want the pod name %q from SLUICE_INSTANCE_ID (valueFrom fieldRef metadata.name)", cfg.InstanceID, podName)
	}
	// A Secret provides the connection settings, as environment variables.
	fromSecret := false
	for _, e := range list(c["env"]) {
		fromSecret = fromSecret || get(e, "valueFrom", "secretKeyRef") != nil
	}
	for _, e := range list(c["envFrom"]) {
		fromSecret = fromSecret || e["secretRef"] != nil
	}
	if !fromSecret {
		t.Errorf("no environment variable comes from a Secret")
	}

	// state_dir is on a volume: a claim of the StatefulSet, or a pod volume (emptyDir).
	sm, _ := mountOf(cfg.Processing.StateDir)
	switch {
	case sm == nil:
		t.Errorf("processing.state_dir %s is on no volume mount", cfg.Processing.StateDir)
	case workload.kind() == "StatefulSet" && !claims[str(sm["name"])]:
		t.Errorf("processing.state_dir %s is on volume %v, not one of the volumeClaimTemplates", cfg.Processing.StateDir, sm["name"])
	case workload.kind() != "StatefulSet" && volumes[str(sm["name"])] == nil:
		t.Errorf("processing.state_dir %s is on volume %v, which the pod does not define", cfg.Processing.StateDir, sm["name"])
	case sm["readOnly"] == true:
		t.Errorf("processing.state_dir %s is mounted read-only", cfg.Processing.StateDir)
	}

	// The probes ask real endpoints, on the port sluice listens on, reachable from the kubelet.
	host, port, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil {
		t.Fatalf("http.listen %q: %v", cfg.HTTP.Listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Errorf("http.listen %s is loopback: probes and Prometheus cannot reach it", cfg.HTTP.Listen)
	}
	if cfg.HTTP.Pprof {
		t.Errorf("http.pprof is on, but http.listen %s is open to the cluster: anyone there could read profiles", cfg.HTTP.Listen)
	}
	if served(t, "/debug/pprof/") {
		t.Errorf("/debug/pprof/ is served with http.pprof off")
	}
	ports := map[string]string{} // name -> number
	for _, p := range list(c["ports"]) {
		ports[str(p["name"])] = fmt.Sprint(p["containerPort"])
	}
	resolve := func(p any) string {
		if n, ok := ports[str(p)]; ok {
			return n
		}
		return fmt.Sprint(p)
	}
	for probe, want := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		hg := get(c, probe, "httpGet")
		if hg == nil {
			t.Errorf("no %s.httpGet", probe)
			continue
		}
		p := str(get(hg, "path"))
		if p != want {
			t.Errorf("%s asks %s, want %s", probe, p, want)
		}
		if !served(t, p) {
			t.Errorf("%s asks %s, which sluice's HTTP handler does not serve", probe, p)
		}
		if got := resolve(get(hg, "port")); got != port {
			t.Errorf("%s asks port %s, but http.listen is %s", probe, got, cfg.HTTP.Listen)
		}
	}
	if a := str(get(workload, "spec", "template", "metadata", "annotations", "prometheus.io/port")); a != "" && a != port {
		t.Errorf("prometheus.io/port %s, but http.listen is %s", a, cfg.HTTP.Listen)
	}
	for _, svc := range objs {
		if svc.kind() != "Service" {
			continue
		}
		for _, sp := range list(get(svc, "spec", "ports")) {
			if str(sp["name"]) == "http" && resolve(sp["targetPort"]) != port {
				t.Errorf("Service %s targets port %v, but http.listen is %s", svc.name(), sp["targetPort"], cfg.HTTP.Listen)
			}
		}
	}

	// The memory limit holds the sort budget and the heap allowance sluice plans for.
	if lim := str(get(c, "resources", "limits", "memory")); lim == "" {
		t.Errorf("no memory limit")
	} else if got, need := quantityBytes(t, lim), memoryLimit(int64(cfg.Backlog.SortMemory), 8); got < need+need/4 {
		t.Errorf("memory limit %s is below the Go memory limit of backlog.sort_memory with 8 partitions (%dMiB) plus a quarter for Pebble and the rest", lim, need>>20)
	}

	// The grace period covers the preStop sleep, a checkpoint in flight at SIGTERM (bounded by
	// kafka.transaction_timeout) and the closing checkpoint and leave (about 30s).
	grace, _ := get(pod, "terminationGracePeriodSeconds").(int)
	sleep, _ := get(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	if get(c, "lifecycle", "preStop") == nil {
		t.Errorf("no preStop hook")
	}
	need := time.Duration(sleep)*time.Second + cfg.Kafka.TransactionTimeout + 30*time.Second
	if time.Duration(grace)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %d is shorter than preStop %ds + kafka.transaction_timeout %s + 30s", grace, sleep, cfg.Kafka.TransactionTimeout)
	}
}

// TestKubernetesSASLExample: the statefulset's Secret with its SASL_SSL lines uncommented still
// passes every check of TestKubernetesManifests, and validate --explain masks the password.
func TestKubernetesSASLExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(manifestDir, "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "  # SLUICE_KAFKA__", "  SLUICE_KAFKA__")
	if strings.Count(text, "SLUICE_KAFKA__SASL__") != strings.Count(string(b), "SLUICE_KAFKA__SASL__") || !strings.Contains(text, "\n  SLUICE_KAFKA__SASL__PASSWORD: ") {
		t.Fatal("statefulset.yaml has no commented SLUICE_KAFKA__SASL__PASSWORD line in its Secret")
	}
	file := filepath.Join(t.TempDir(), "statefulset.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := readManifests(t, file)
	for _, o := range objs {
		if o.kind() != "StatefulSet" {
			continue
		}
		pod := get(o, "spec", "template", "spec")
		c := list(get(pod, "containers"))[0]
		checkSluiceContainer(t, objs, o, pod, c)
		env := containerEnv(t, objs, c, o.name()+"-0")
		if !slices.Contains(env, "SLUICE_KAFKA__SASL__PASSWORD=replace-me") {
			t.Errorf("the container's environment has no SASL password: %v", env)
		}
		var out, errb bytes.Buffer
		cfgFile := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(cfgFile, []byte(str(get(find(objs, "ConfigMap", "sluice-revenue-config"), "data", "config.yaml"))), 0o644); err != nil {
			t.Fatal(err)
		}
		if code := realMain([]string{"validate", "--explain", "-c", cfgFile}, &out, &errb); code != 0 || strings.Contains(out.String(), "replace-me") {
			t.Errorf("validate --explain: exit %d, password shown: %v\n%s%s", code, strings.Contains(out.String(), "replace-me"), out.String(), errb.String())
		}
		return
	}
	t.Fatal("no StatefulSet in statefulset.yaml")
}
