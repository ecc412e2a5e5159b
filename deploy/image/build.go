package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's contract. The Kubernetes manifests in deploy/kubernetes rely on the user (their
// runAsUser), the port and the absence of a shell; the test checks them against each other.
const (
	binaryPath = "/usr/local/bin/sluice"
	configPath = "/etc/sluice/config.yaml"
	workDir    = "/data"
	uid        = 65532
	userName   = "sluice"
	httpPort   = "9464/tcp"
	caPath     = "/etc/ssl/certs/ca-certificates.crt" // where crypto/x509 looks first on Linux

	// sluicePackage is built by import path, so the builder works from any directory of the
	// module.
	sluicePackage = "github.com/sluice-dev/sluice/cmd/sluice"
)

// caCandidates are the CA bundles of common build machines (Debian/Ubuntu, Fedora/RHEL,
// Alpine/macOS); the first that exists goes into the image.
var caCandidates = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/cert.pem",
}

// options is what one build makes. Every field is an input of the image's digest: the same
// options (and the same CA bundle and Go toolchain) give the same digests.
type options struct {
	Out        string        // output directory (dist)
	Version    string        // stamped into the binary (main.version) and the labels
	Revision   string        // VCS revision for the label; empty leaves the label out
	Source     string        // repository URL for the label
	Repository string        // image name of the docker tarballs' tag (sluice, registry.example.com/sluice)
	Tag        string        // tag of the docker tarballs; empty means Version
	Platforms  []v1.Platform // linux/amd64, linux/arm64
	CACerts    string        // CA bundle copied into the image; empty for none
	Created    time.Time     // every timestamp in the image (SOURCE_DATE_EPOCH)
	Log        io.Writer     // progress lines
}

// result is what a build wrote.
type result struct {
	Layout string  // the OCI layout directory: one multi-platform index
	Index  v1.Hash // digest of that index
}

// build cross-compiles sluice for each platform, puts each binary on the base layer, and
// writes the OCI layout <Out>/sluice-oci (an index of every platform) and one docker tarball
// per platform, <Out>/sluice-<os>-<arch>.tar, tagged <Repository>:<Tag>.
func build(ctx context.Context, o options) (*result, error) {
	if o.Tag == "" {
		o.Tag = o.Version
	}
	tag, err := name.NewTag(o.Repository+":"+o.Tag, name.WeakValidation)
	if err != nil {
		return nil, fmt.Errorf("image name %s:%s (set -image and -tag): %w", o.Repository, o.Tag, err)
	}
	if len(o.Platforms) == 0 {
		return nil, fmt.Errorf("no platform to build")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(o.Out, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	base, err := baseLayer(o)
	if err != nil {
		return nil, err
	}
	res := &result{Layout: filepath.Join(o.Out, "sluice-oci")}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		bin := filepath.Join(tmp, "sluice-"+p.OS+"-"+p.Architecture)
		if err := compile(ctx, o, p, bin); err != nil {
			return nil, err
		}
		img, err := platformImage(o, p, base, bin)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, err
		}
		size, err := imageSize(img)
		if err != nil {
			return nil, err
		}
		tb := filepath.Join(o.Out, "sluice-"+p.OS+"-"+p.Architecture+".tar")
		if err := tarball.WriteToFile(tb, tag, img); err != nil {
			return nil, fmt.Errorf("write %s: %w", tb, err)
		}
		fmt.Fprintf(o.Log, "%s: %s (%s) → %s\n", p, digest, mib(size), tb)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	idx = mutate.Annotations(idx, annotations(o)).(v1.ImageIndex)
	if res.Index, err = idx.Digest(); err != nil {
		return nil, err
	}

	// A fresh layout each time: appending to an old one would keep its blobs and entries.
	if err := os.RemoveAll(res.Layout); err != nil {
		return nil, err
	}
	lp, err := layout.Write(res.Layout, empty.Index)
	if err != nil {
		return nil, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Tag,
	})); err != nil {
		return nil, fmt.Errorf("write %s: %w", res.Layout, err)
	}
	fmt.Fprintf(o.Log, "index: %s → %s\n", res.Index, res.Layout)
	return res, nil
}

// compile builds a static sluice for p: no cgo, no local paths, no VCS stamp (the revision is
// a label), the version where `sluice version` reads it.
func compile(ctx context.Context, o options, p v1.Platform, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build",
		"-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+o.Version,
		"-o", out, sluicePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Architecture == "arm" && p.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, b)
	}
	fmt.Fprintf(o.Log, "%s: go build %s in %s\n", p, sluicePackage, time.Since(start).Round(time.Millisecond))
	return nil
}

// platformImage is base + a layer with the binary, and the config.
func platformImage(o options, p v1.Platform, base v1.Layer, bin string) (v1.Image, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var fs tarFS
	fs.dir("usr", 0, 0o755)
	fs.dir("usr/local", 0, 0o755)
	fs.dir("usr/local/bin", 0, 0o755)
	fs.file(strings.TrimPrefix(binaryPath, "/"), 0, 0o755, b)
	binLayer, err := fs.layer(o.Created)
	if err != nil {
		return nil, err
	}

	created := v1.Time{Time: o.Created}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "deploy/image: /etc (passwd, group, CA certificates), /data, /tmp",
		}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "deploy/image: go build -trimpath " + sluicePackage + " → " + binaryPath,
		}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = v1.Config{
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"run", "-c", configPath},
		User:         fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir:   workDir,
		ExposedPorts: map[string]struct{}{httpPort: {}},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
		},
		Labels: annotations(o),
	}
	if o.CACerts != "" {
		cf.Config.Env = append(cf.Config.Env, "SSL_CERT_FILE="+caPath)
	}
	return mutate.ConfigFile(img, cf)
}

// annotations are the image's labels, and the index's annotations.
func annotations(o options) map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       "sluice",
		"org.opencontainers.image.description": "sluice, a Kafka-native stream processor",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	if o.Revision != "" {
		a["org.opencontainers.image.revision"] = o.Revision
	}
	return a
}

// baseLayer is what a distroless "static" image has and sluice needs: a passwd and group with
// the non-root user (Go's os/user and the kubelet's runAsNonRoot read the numeric id; tools
// read the name), the CA bundle for TLS to brokers, a /data owned by the user (WORKDIR: the
// default processing.state_dir ./data lands there) and /tmp. No shell.
func baseLayer(o options) (v1.Layer, error) {
	var fs tarFS
	fs.dir("etc", 0, 0o755)
	fs.file("etc/passwd", 0, 0o644, fmt.Appendf(nil,
		"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", userName, uid, uid, userName, workDir))
	fs.file("etc/group", 0, 0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, uid))
	if o.CACerts != "" {
		b, err := os.ReadFile(o.CACerts)
		if err != nil {
			return nil, fmt.Errorf("CA certificates: %w", err)
		}
		fs.dir("etc/ssl", 0, 0o755)
		fs.dir("etc/ssl/certs", 0, 0o755)
		fs.file(strings.TrimPrefix(caPath, "/"), 0, 0o644, b)
	}
	fs.dir(strings.TrimPrefix(workDir, "/"), uid, 0o755)
	fs.dir("tmp", 0, 0o1777)
	return fs.layer(o.Created)
}

// tarFS is a layer's file system in memory, written in a fixed order with fixed times and
// owners so that a layer's bytes depend only on its content.
type tarFS struct{ entries []tarEntry }

type tarEntry struct {
	hdr  tar.Header
	data []byte
}

func (f *tarFS) dir(path string, owner int, mode int64) {
	f.entries = append(f.entries, tarEntry{hdr: tar.Header{
		Typeflag: tar.TypeDir, Name: path + "/", Mode: mode, Uid: owner, Gid: owner,
	}})
}

func (f *tarFS) file(path string, owner int, mode int64, data []byte) {
	f.entries = append(f.entries, tarEntry{hdr: tar.Header{
		Typeflag: tar.TypeReg, Name: path, Mode: mode, Uid: owner, Gid: owner, Size: int64(len(data)),
	}, data: data})
}

func (f *tarFS) layer(mtime time.Time) (v1.Layer, error) {
	sort.SliceStable(f.entries, func(i, j int) bool { return f.entries[i].hdr.Name < f.entries[j].hdr.Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range f.entries {
		h := e.hdr
		h.ModTime = mtime.UTC()
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// imageSize is what a registry stores for an image: manifest, config and compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
