package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"
)

// TestImage builds the image for one platform (the host's architecture, so that its binary
// runs here) twice with the builder's command line, reads it back from the OCI layout and the docker tarball, and checks the
// config, the file system, the binary (`sluice version`, `sluice validate`), that the two
// builds have one digest, and that the Kubernetes manifests agree with the image.
func TestImage(t *testing.T) {
	arch := runtime.GOARCH
	if arch != "amd64" && arch != "arm64" {
		arch = "amd64"
	}
	platforms, err := parsePlatforms("linux/" + arch)
	if err != nil {
		t.Fatal(err)
	}
	p := platforms[0]
	ca := filepath.Join(t.TempDir(), "ca.pem")
	caBundle := []byte("-----BEGIN CERTIFICATE-----\nnot a real one\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(ca, caBundle, 0o600); err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1700000000, 0).UTC()
	const version, revision = "1.2.3-test", "0123456789abcdef0123456789abcdef01234567"

	// The builder runs as `make image` runs it, a program of its own: inside this test binary
	// it would run under the race detector, four times slower.
	builder := filepath.Join(t.TempDir(), "image")
	if out, err := exec.Command("go", "build", "-o", builder, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build ./deploy/image: %v\n%s", err, out)
	}
	buildImage := func(t *testing.T, out string) (dir string, index v1.Hash) {
		cmd := exec.Command(builder, "-o", out, "-version", version, "-revision", revision,
			"-image", "registry.example.com/sluice", "-platforms", p.String(), "-ca-certs", ca)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("%s\n%s", cmd, stderr.Bytes())
		if err != nil {
			t.Fatalf("image: %v", err)
		}
		dir, digest, ok := strings.Cut(strings.TrimSpace(stdout.String()), "@")
		if index, err = v1.NewHash(digest); !ok || err != nil || dir != filepath.Join(out, "sluice-oci") {
			t.Fatalf("image printed %q, want %s/sluice-oci@<index digest>", stdout.Bytes(), out)
		}
		return dir, index
	}
	out := t.TempDir()
	layoutDir, index := buildImage(t, out)

	t.Run("reproducible", func(t *testing.T) {
		if _, again := buildImage(t, t.TempDir()); again != index {
			t.Errorf("two builds of one commit: index %s, then %s", index, again)
		}
	})

	// The layout: index.json names one multi-platform index, tagged with the version.
	outer, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(om.Manifests) != 1 || om.Manifests[0].MediaType != types.OCIImageIndex ||
		om.Manifests[0].Digest != index || om.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json: %+v, want one OCI index %s named %s", om.Manifests, index, version)
	}
	idx, err := outer.ImageIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || !im.Manifests[0].Platform.Equals(p) ||
		im.Manifests[0].MediaType != types.OCIManifestSchema1 {
		t.Fatalf("index: %+v, want one OCI image for %s", im.Manifests, p)
	}
	if im.Annotations["org.opencontainers.image.version"] != version {
		t.Errorf("index annotations: %v", im.Annotations)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("config", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		check := func(what string, got, want any) {
			t.Helper()
			if !equal(got, want) {
				t.Errorf("%s = %v, want %v", what, got, want)
			}
		}
		check("os/arch", cf.OS+"/"+cf.Architecture+"/"+cf.Variant, p.OS+"/"+p.Architecture+"/"+p.Variant)
		check("created", cf.Created.Time.UTC(), epoch)
		check("entrypoint", c.Entrypoint, []string{"/usr/local/bin/sluice"})
		check("cmd", c.Cmd, []string{"run", "-c", "/etc/sluice/config.yaml"})
		check("user", c.User, "65532:65532")
		check("workdir", c.WorkingDir, "/data")
		check("exposed ports", c.ExposedPorts, map[string]struct{}{"9464/tcp": {}})
		for k, want := range map[string]string{
			"org.opencontainers.image.source":   "https://github.com/sluice-dev/sluice",
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": revision,
			"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
		} {
			check("label "+k, c.Labels[k], want)
		}
		for _, h := range cf.History {
			check("history time", h.Created.Time.UTC(), epoch)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		check("config media type", m.Config.MediaType, types.OCIConfigJSON)
		for _, l := range m.Layers {
			check("layer media type", l.MediaType, types.OCILayer)
		}
	})

	// The file system, flattened.
	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		files[n] = h
		if h.Typeflag == tar.TypeReg {
			if contents[n], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("files", func(t *testing.T) {
		for n, h := range files {
			if !h.ModTime.Equal(epoch) {
				t.Errorf("%s: mtime %s, want %s", n, h.ModTime, epoch)
			}
		}
		want := []struct {
			path string
			typ  byte
			uid  int
			mode int64
		}{
			{"/usr/local/bin/sluice", tar.TypeReg, 0, 0o755},
			{"/etc/passwd", tar.TypeReg, 0, 0o644},
			{"/etc/group", tar.TypeReg, 0, 0o644},
			{"/etc/ssl/certs/ca-certificates.crt", tar.TypeReg, 0, 0o644},
			{"/data", tar.TypeDir, 65532, 0o755},
			{"/tmp", tar.TypeDir, 0, 0o1777},
		}
		for _, w := range want {
			h := files[w.path]
			if h == nil {
				t.Errorf("%s: missing", w.path)
				continue
			}
			if h.Typeflag != w.typ || h.Uid != w.uid || h.Gid != w.uid || h.Mode != w.mode {
				t.Errorf("%s: type %c uid %d gid %d mode %o, want type %c owner %d mode %o",
					w.path, h.Typeflag, h.Uid, h.Gid, h.Mode, w.typ, w.uid, w.mode)
			}
		}
		if !strings.Contains(string(contents["/etc/passwd"]), "\nsluice:x:65532:65532:sluice:/data:") {
			t.Errorf("/etc/passwd has no user 65532:\n%s", contents["/etc/passwd"])
		}
		if !bytes.Equal(contents["/etc/ssl/certs/ca-certificates.crt"], caBundle) {
			t.Errorf("CA bundle is not the build machine's")
		}
		// The manifests' preStop uses the kubelet's sleep because there is no shell.
		for _, sh := range []string{"/bin/sh", "/bin/bash", "/bin/busybox"} {
			if files[sh] != nil {
				t.Errorf("%s is in the image", sh)
			}
		}
	})

	bin := contents["/usr/local/bin/sluice"]
	t.Run("binary", func(t *testing.T) {
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("/usr/local/bin/sluice is not ELF: %v", err)
		}
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
		if f.Machine != machine || f.Class != elf.ELFCLASS64 {
			t.Errorf("ELF machine %s class %s, want %s", f.Machine, f.Class, machine)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("dynamically linked (%s): the image has no libc", prog.Type)
			}
		}
		// How it was built, and that the shipped binary does not link the image builder.
		bi, err := buildinfo.Read(bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": p.Architecture} {
			if settings[k] != want {
				t.Errorf("build setting %s = %q, want %q", k, settings[k], want)
			}
		}
		if bi.Path != "github.com/sluice-dev/sluice/cmd/sluice" {
			t.Errorf("binary of %s", bi.Path)
		}
		for _, d := range bi.Deps {
			if strings.HasPrefix(d.Path, "github.com/google/go-containerregistry") {
				t.Errorf("sluice links %s: only deploy/image may", d.Path)
			}
		}

		if runtime.GOOS != "linux" || runtime.GOARCH != p.Architecture {
			t.Skipf("a linux/%s binary does not run on %s/%s", p.Architecture, runtime.GOOS, runtime.GOARCH)
		}
		exe := filepath.Join(t.TempDir(), "sluice")
		if err := os.WriteFile(exe, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(exe, "version").CombinedOutput()
		if err != nil || string(out) != "sluice "+version+"\n" {
			t.Errorf("sluice version: %v, %q, want %q", err, out, "sluice "+version+"\n")
		}
		out, err = exec.Command(exe, "validate", "-c", "../../configs/examples/minimal.yaml").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "minimal.yaml: ok") {
			t.Errorf("sluice validate: %v\n%s", err, out)
		}
	})

	t.Run("docker tarball", func(t *testing.T) {
		tag, err := name.NewTag("registry.example.com/sluice:" + version)
		if err != nil {
			t.Fatal(err)
		}
		tb := filepath.Join(out, "sluice-linux-"+p.Architecture+".tar")
		timg, err := tarball.ImageFromPath(tb, &tag)
		if err != nil {
			t.Fatalf("%s has no image %s: %v", tb, tag, err)
		}
		got, err := timg.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		want, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("docker tarball config %s, OCI layout config %s", got, want)
		}
	})

	t.Run("kubernetes manifests", func(t *testing.T) { checkManifests(t) })
}

// checkManifests: the pods of deploy/kubernetes run as the image's user, and their sluice
// containers run the image `make image` documents.
func checkManifests(t *testing.T) {
	paths, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		var ids, images int
		for {
			var doc any
			if err := dec.Decode(&doc); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			walk(doc, func(m map[string]any) {
				for _, k := range []string{"runAsUser", "runAsGroup", "fsGroup"} {
					if v, ok := m[k]; ok {
						ids++
						if v != 65532 {
							t.Errorf("%s: %s %v, the image's user is 65532", path, k, v)
						}
					}
				}
				if m["name"] == "sluice" && m["image"] != nil {
					images++
					if img, _ := m["image"].(string); !strings.HasPrefix(img, "registry.example.com/sluice:") {
						t.Errorf("%s: sluice's image is %v, not the registry.example.com/sluice of README.md", path, m["image"])
					}
				}
			})
		}
		if ids == 0 || images == 0 {
			t.Errorf("%s: %d user ids and %d sluice images: the manifests changed shape", path, ids, images)
		}
	}
}

func walk(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(v)
		for _, e := range v {
			walk(e, f)
		}
	case []any:
		for _, e := range v {
			walk(e, f)
		}
	}
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case []string:
		return slices.Equal(a, b.([]string))
	case map[string]struct{}:
		bm := b.(map[string]struct{})
		if len(a) != len(bm) {
			return false
		}
		for k := range a {
			if _, ok := bm[k]; !ok {
				return false
			}
		}
		return true
	case time.Time:
		return a.Equal(b.(time.Time))
	}
	return a == b
}
