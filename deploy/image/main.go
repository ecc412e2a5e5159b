// Command image builds sluice's container image without a Docker daemon: it cross-compiles a
// static sluice (CGO_ENABLED=0, -trimpath) for each platform and assembles the image with
// go-containerregistry. `make image` runs it; the flags say what it makes:
//
//	go run ./deploy/image -o dist -version 0.1.0 -revision $(git rev-parse HEAD)
//
// It writes dist/sluice-oci, an OCI image layout holding one multi-platform index (push it
// with `crane push dist/sluice-oci REF` or `skopeo copy --all oci:dist/sluice-oci
// docker://REF`), and dist/sluice-<os>-<arch>.tar per platform, a tarball that `docker load
// -i` takes, tagged -image:-tag.
//
// The image: a scratch file system with /etc/passwd and /etc/group (user sluice, 65532), the
// build machine's CA bundle, a /data owned by 65532 (the WORKDIR), /tmp, and the binary at
// /usr/local/bin/sluice; ENTRYPOINT [/usr/local/bin/sluice], CMD [run -c
// /etc/sluice/config.yaml], USER 65532:65532, port 9464 (http.listen must be 0.0.0.0:9464 to
// reach it), OCI labels with the version, revision and source. No shell.
//
// The build is reproducible: every time in the image is -epoch (SOURCE_DATE_EPOCH), the binary
// carries no path or VCS stamp, and the layers are written in a fixed order, so the same
// commit, Go toolchain and CA bundle give the same digests.
//
// This is a separate program so that the shipped sluice binary does not link
// go-containerregistry.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("o", "dist", "output directory")
	version := fs.String("version", "0.1.0-dev", "version stamped into the binary (sluice version) and the labels")
	revision := fs.String("revision", "", "VCS revision for the org.opencontainers.image.revision label")
	source := fs.String("source", "https://github.com/sluice-dev/sluice", "repository URL for the org.opencontainers.image.source label")
	repo := fs.String("image", "sluice", "image name in the docker tarballs' tag (e.g. registry.example.com/sluice)")
	tag := fs.String("tag", "", "tag in the docker tarballs (default: -version)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant] list")
	caCerts := fs.String("ca-certs", "auto", "CA bundle to copy into the image: a file, auto (the build machine's, if found) or none")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	o := options{
		Out: *out, Version: *version, Revision: *revision, Source: *source,
		Repository: *repo, Tag: *tag, Log: os.Stderr,
	}
	var err error
	if o.Platforms, err = parsePlatforms(*platforms); err != nil {
		return err
	}
	if o.CACerts, err = findCACerts(*caCerts); err != nil {
		return err
	}
	if o.Created, err = parseEpoch(*epoch); err != nil {
		return err
	}
	if o.CACerts == "" {
		fmt.Fprintln(os.Stderr, "image: no CA bundle: TLS to brokers needs one mounted at /etc/ssl/certs/ca-certificates.crt")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := build(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", res.Layout, res.Index)
	return nil
}

// parsePlatforms reads linux/amd64,linux/arm64. arm64 gets the variant v8 that registries and
// containerd normalise it to.
func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for f := range strings.SplitSeq(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-platforms %q: %w", f, err)
		}
		if p.OS != "linux" {
			return nil, fmt.Errorf("-platforms %q: only linux images", f)
		}
		if p.Architecture == "arm64" && p.Variant == "" {
			p.Variant = "v8"
		}
		ps = append(ps, *p)
	}
	return ps, nil
}

func findCACerts(flagValue string) (string, error) {
	switch flagValue {
	case "none", "":
		return "", nil
	case "auto":
		for _, c := range caCandidates {
			if _, err := os.Stat(c); err == nil {
				return c, nil
			}
		}
		return "", nil
	}
	if _, err := os.Stat(flagValue); err != nil {
		return "", fmt.Errorf("-ca-certs: %w", err)
	}
	return flagValue, nil
}

func parseEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("-epoch (SOURCE_DATE_EPOCH) %q: not a Unix time: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}
