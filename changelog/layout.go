package changelog

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/state"
)

// ErrLayout is wrapped by the errors of a restore that met a changelog record of another state
// layout (test with errors.Is).
var ErrLayout = errors.New("changelog: state layout changed")

// ResetHint is the advice that ends every layout error: what the user most likely changed and
// the two ways out.
func ResetHint(op, topic string) string {
	return fmt.Sprintf("was the aggregate's fields list changed? Put the previous fields back, or start the operator's state over "+
		"from empty with `sluice reset -c FILE --operator %s` (with sluice stopped, on every instance: it deletes the "+
		"operator's local state and the changelog topic %s, which the next start recreates)", op, topic)
}

// checkLayout returns an error if rec carries a layout fingerprint (codec.HeaderLayout) other
// than want or one of accepted ("" checks nothing). Records of sluice versions before the
// header have none; the Restorer's Valid hook is their only check. It does not allocate.
func checkLayout(rec *kgo.Record, ns state.Namespace, want, wantText string, accepted []string) error {
	if want == "" {
		return nil
	}
	for _, h := range rec.Headers {
		if h.Key == codec.HeaderLayout && string(h.Value) != want && !acceptedLayout(h.Value, accepted) {
			return fmt.Errorf("%w: %s[%d] offset %d holds a state of operator %s written under another layout (fingerprint %s; this config's is %s: %s); %s",
				ErrLayout, rec.Topic, rec.Partition, rec.Offset, ns.Operator, h.Value, want, wantText, ResetHint(ns.Operator, rec.Topic))
		}
	}
	return nil
}

// acceptedLayout reports whether fingerprint fp is one of accepted. It does not allocate.
func acceptedLayout(fp []byte, accepted []string) bool {
	for _, a := range accepted {
		if string(fp) == a {
			return true
		}
	}
	return false
}

// invalidState is the error for a value that the Valid hook refuses.
func invalidState(rec *kgo.Record, ns state.Namespace, wantText string) error {
	layout := ""
	if wantText != "" {
		layout = " (" + wantText + ")"
	}
	return fmt.Errorf("%w: %s[%d] offset %d: its value (%d bytes) is not a state of operator %s under this config's layout%s; %s",
		ErrLayout, rec.Topic, rec.Partition, rec.Offset, len(rec.Value), ns.Operator, layout, ResetHint(ns.Operator, rec.Topic))
}

// undecodable is the error for a value that the Decode hook refuses.
func undecodable(rec *kgo.Record, ns state.Namespace, wantText string, err error) error {
	layout := ""
	if wantText != "" {
		layout = " (" + wantText + ")"
	}
	return fmt.Errorf("%w: %s[%d] offset %d: its value is not a result of operator %s under this config's layout%s, so it cannot rebuild the key's state: %v; %s",
		ErrLayout, rec.Topic, rec.Partition, rec.Offset, ns.Operator, layout, err, ResetHint(ns.Operator, rec.Topic))
}

// invalidWatermark is the error for a watermark record whose value is not 8 bytes.
func invalidWatermark(rec *kgo.Record, ns state.Namespace) error {
	return fmt.Errorf("%w: %s[%d] offset %d: a watermark record of operator %s holds %d bytes under key %q, want 8 under wm or wm/<input> (sluice did not write it); "+
		"start the operator's state over with `sluice reset -c FILE --operator %s` (with sluice stopped, on every instance)",
		ErrLayout, rec.Topic, rec.Partition, rec.Offset, ns.Operator, len(rec.Value), rec.Key, ns.Operator)
}
