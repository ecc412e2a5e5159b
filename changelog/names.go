package changelog

import (
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/state"
)

// The store's namespaces. An operator's state lives in the namespace named after it (one per
// partition); everything sluice keeps beside it lives in a reserved namespace named
// "<operator>#<suffix>" ('#' cannot occur in operator or table names, configs validates them),
// all named here:
//
//	<op>#pending    keys whose output a backlog checkpoint left owed (PendingNamespace)
//	<op>#watermark  the committed watermarks: the operator's, its inputs', its writers' (WatermarkNamespace)
//	<op>#timers     a windowed operator's timers, by close time (TimerNamespace)
//	<op>#layout     the layout of the operator's state bytes (LayoutNamespace)
//	<table>#table   a table's rows (TableNamespace; the table's topic is its changelog)
const (
	suffixPending   = "#pending"
	suffixWatermark = "#watermark"
	suffixTimers    = "#timers"
	suffixLayout    = "#layout"
	suffixTable     = "#table"
)

// PendingNamespace is where a restore records the keys whose latest changelog record carries
// PendingHeader.
func PendingNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixPending) }

// IsPendingNamespace reports whether ns is an operator's PendingNamespace.
func IsPendingNamespace(ns state.Namespace) bool {
	return strings.HasSuffix(ns.Operator, suffixPending)
}

// WatermarkNamespace is where the task stores its committed watermarks (keys: WatermarkKey,
// InputWatermarkKey, WriterWatermarkKey).
func WatermarkNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixWatermark) }

// TimerNamespace is where a windowed operator's timers live.
func TimerNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixTimers) }

// LayoutNamespace is where the layout of ns's state is stored.
func LayoutNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixLayout) }

// TableNamespace is the namespace of table name's partition.
func TableNamespace(name string, partition int32) state.Namespace {
	return state.Namespace{Operator: name + suffixTable, Partition: partition}
}

// OwnedBy reports whether ns holds operator op's state: op's own namespace or one reserved
// beside it.
func OwnedBy(ns state.Namespace, op string) bool {
	return ns.Operator == op || strings.HasPrefix(ns.Operator, op+"#")
}

func reserved(ns state.Namespace, suffix string) state.Namespace {
	return state.Namespace{Operator: ns.Operator + suffix, Partition: ns.Partition}
}

// InputWatermarkKey is the key of input i's watermark beside the operator's (WatermarkKey), in
// WatermarkNamespace and the changelog of an operator of several inputs.
func InputWatermarkKey(i int) []byte { return fmt.Appendf(nil, "%s/%d", WatermarkKey, i) }

// WriterWatermarkKey is the key of the watermark writer w announced to input i (a reader of an
// internal topic that carries event time), beside the operator's, in WatermarkNamespace and
// the changelog.
func WriterWatermarkKey(i, w int) []byte { return fmt.Appendf(nil, "%s/%d/%d", WatermarkKey, i, w) }
