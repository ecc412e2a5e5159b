package codec

import (
	"strings"

	"github.com/sluice-dev/sluice/state"
)

// The store's namespaces. An operator's state lives in the namespace named after it (one per
// partition); everything sluice keeps beside it lives in a reserved namespace named
// "<operator>#<suffix>" ('#' cannot occur in operator or table names, configs validates them):
//
//	<op>#pending    keys whose output a backlog checkpoint left owed (PendingNamespace)
//	<op>#watermark  the committed watermarks: the operator's, its inputs', its writers' (WatermarkNamespace)
//	<op>#timers     a windowed or Keyed operator's timers, by time (TimerNamespace)
//	<op>#layout     the layout of the operator's state bytes (LayoutNamespace)
//	<table>#table   a table's rows (TableNamespace; the table's topic is its changelog)
const (
	suffixPending   = "#pending"
	suffixWatermark = "#watermark"
	suffixTimers    = "#timers"
	suffixLayout    = "#layout"
	suffixTable     = "#table"
)

// PendingNamespace is where the keys whose output a backlog checkpoint left owed are marked
// (value: empty); a restore marks there the keys whose latest changelog record carries
// HeaderPending.
func PendingNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixPending) }

// IsPendingNamespace reports whether ns is an operator's PendingNamespace.
func IsPendingNamespace(ns state.Namespace) bool {
	return strings.HasSuffix(ns.Operator, suffixPending)
}

// WatermarkNamespace is where the task stores its committed watermarks (keys: WatermarkKey,
// InputWatermarkKey, WriterWatermarkKey).
func WatermarkNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixWatermark) }

// TimerNamespace is where a windowed or Keyed operator's timers live (keys: AppendTimerKey,
// values empty).
func TimerNamespace(ns state.Namespace) state.Namespace { return reserved(ns, suffixTimers) }

// LayoutNamespace is where the layout of ns's state is stored (keys: LayoutFingerprintKey,
// LayoutTextKey).
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

// Keys of a LayoutNamespace: the layout's fingerprint and its text (operators.Layout). The
// slices are shared: never modify them.
var (
	LayoutFingerprintKey = []byte("fingerprint")
	LayoutTextKey        = []byte("text")
)
