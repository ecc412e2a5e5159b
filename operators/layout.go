package operators

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Layout describes what a keyed operator's stored state bytes mean: the operator kind, the
// state format version, and every part of its config that the bytes depend on (for an
// aggregate: its fields, in state order, each with its function and input field). Two configs
// with equal layouts read each other's state; a state written under another layout must never be
// read as if it were this one (the runtime refuses to start instead, see operators/task).
//
// The text of String is stored beside the state and hashed into Fingerprint, which travels on
// every changelog record: it is a persistent format. Change it only together with the state
// format version, and only by adding parts (a windowed aggregate adds its window, for example
// "window=tumbling:60000ms", after the fields). A Layout is a plain value, safe for concurrent
// use.
type Layout struct {
	Kind    string   // "aggregate"
	Version int      // the state format version of Kind
	Parts   []string // what else determines the bytes' meaning, in a fixed order
	// Accepts are other layouts whose states this one reads as its own (a join that keeps some
	// members of its records reads the states of one that kept them all): a state stored under
	// one of them, or a changelog record written under one, is taken as it is. Not part of
	// String or Fingerprint.
	Accepts []Layout
}

// Accepted returns the fingerprints of l.Accepts.
func (l Layout) Accepted() []string {
	var fps []string
	for _, a := range l.Accepts {
		fps = append(fps, a.Fingerprint())
	}
	return fps
}

// String returns the layout's canonical text, "<kind>/v<version> <part> <part> ...", e.g.
//
//	aggregate/v1 amount=sum(amount) n=count() top=max(amount)
func (l Layout) String() string {
	var b strings.Builder
	b.WriteString(l.Kind)
	b.WriteString("/v")
	b.WriteString(strconv.Itoa(l.Version))
	for _, p := range l.Parts {
		b.WriteByte(' ')
		b.WriteString(p)
	}
	return b.String()
}

// Fingerprint returns 16 hex digits of the SHA-256 of String: short enough for a header on every
// changelog record, long enough that two layouts never share one by chance.
func (l Layout) Fingerprint() string {
	sum := sha256.Sum256([]byte(l.String()))
	return hex.EncodeToString(sum[:8])
}

// ParseLayout parses the text of String. It reports false for text String cannot produce.
func ParseLayout(text string) (Layout, bool) {
	var words []string
	for rest := text; rest != ""; {
		i := 0
		for i < len(rest) && rest[i] != ' ' {
			if rest[i] != '"' {
				i++
				continue
			}
			q, err := strconv.QuotedPrefix(rest[i:])
			if err != nil {
				return Layout{}, false
			}
			i += len(q)
		}
		words = append(words, rest[:i])
		rest = strings.TrimPrefix(rest[i:], " ")
	}
	if len(words) == 0 {
		return Layout{}, false
	}
	kind, v, ok := strings.Cut(words[0], "/v")
	version, err := strconv.Atoi(v)
	if !ok || err != nil || kind == "" {
		return Layout{}, false
	}
	return Layout{Kind: kind, Version: version, Parts: words[1:]}, true
}

// LayoutPart formats one part of a layout as name=fn(args...), quoting any name or argument
// that holds characters other than letters, digits, '_', '-' and '.' (so the text of distinct
// layouts always differs).
func LayoutPart(name, fn string, args ...string) string {
	var b strings.Builder
	b.WriteString(layoutWord(name))
	b.WriteByte('=')
	b.WriteString(layoutWord(fn))
	b.WriteByte('(')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(layoutWord(a))
	}
	b.WriteByte(')')
	return b.String()
}

func layoutWord(s string) string {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return strconv.Quote(s)
		}
	}
	return s
}

// Layout returns the aggregate's state layout: the state format version and its fields in state
// (name) order, each as name=function(input field), with type=string and where=<expression>
// when the field has them (version 2, stateVersionFields; an aggregate with neither keeps
// version 1 and the text it always had). The order of the fields in the YAML file
// does not matter; renaming a field, changing its function or its input field, or adding or
// removing one changes the layout. The emit mode does not (it changes no state byte).
//
// Layout, Fingerprint and ValidState only read what NewAggregate compiled: unlike the rest of
// Aggregate, they are safe for concurrent use.
func (a *Aggregate) Layout() Layout {
	l := Layout{Kind: "aggregate", Version: int(a.version), Parts: make([]string, 0, len(a.specs))}
	if len(a.inputs) > 1 {
		// A cogroup: its inputs in order (a count per input heads the state), and each
		// field's input.
		l.Kind = "cogroup"
		l.Parts = append(l.Parts, LayoutPart("inputs", "list", a.inputs...))
	}
	for k := range a.specs {
		s := &a.specs[k]
		args := []string{}
		if s.kind != aggCount {
			args = append(args, s.field)
		}
		if s.str >= 0 {
			args = append(args, "type=string")
		}
		if s.where >= 0 {
			args = append(args, "where="+a.whereText[s.where])
		}
		if len(a.inputs) > 1 {
			args = append(args, "from="+a.inputs[s.src])
		}
		l.Parts = append(l.Parts, LayoutPart(s.name, aggNames[s.kind], args...))
	}
	if a.window != "" {
		l.Parts = append(l.Parts, a.window)
	}
	if a.retract {
		// The count is signed and the input a change stream.
		l.Parts = append(l.Parts, LayoutPart("input", "changes", "retract"))
	}
	if a.outputLog {
		// The stored offsets are the output topic's; a restore reads results, not states.
		l.Parts = append(l.Parts, LayoutPart("changelog", "output"))
	}
	return l
}

// Fingerprint is Layout().Fingerprint().
func (a *Aggregate) Fingerprint() string { return a.Layout().Fingerprint() }

// aggNames are the config names of the aggregate kinds (the persistent text of a layout).
var aggNames = [...]string{aggSum: "sum", aggCount: "count", aggMin: "min", aggMax: "max", aggAvg: "avg"}
