package configs

import "strings"

// GroupByPart is one part of a group_by: a field path (bidder, customers.region), or a key
// column an expression computes, written name: expression (day: date_format(dateTime,
// 'yyyy-MM-dd')), as SQL groups by an expression.
type GroupByPart struct {
	Text string // as written, trimmed
	Name string // the key column: the path, or the name before the colon
	Expr string // the expression, trimmed; empty for a path
}

// SplitGroupBy splits a group_by into its parts at the commas outside parentheses, brackets,
// braces and string literals (an expression's arguments stay whole). Parts are trimmed; empty
// ones are kept, for the validation to refuse.
func SplitGroupBy(spec string) []GroupByPart {
	var parts []GroupByPart
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(spec); i++ {
		c := spec[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, groupByPart(spec[start:i]))
			start = i + 1
		}
	}
	return append(parts, groupByPart(spec[start:]))
}

// groupByPart reads one part: name: expression when it starts with a name (letters, digits,
// '_', not a digit first) and a colon, else a field path.
func groupByPart(s string) GroupByPart {
	s = strings.TrimSpace(s)
	p := GroupByPart{Text: s, Name: s}
	name, expr, ok := strings.Cut(s, ":")
	if name = strings.TrimSpace(name); ok && isIdent(name) {
		p.Name, p.Expr = name, strings.TrimSpace(expr)
	}
	return p
}

// GroupByNames returns the key columns of a group_by, in order.
func GroupByNames(spec string) []string {
	parts := SplitGroupBy(spec)
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name
	}
	return names
}

// isIdent reports whether s is a name an expression could use: letters, digits and '_', not
// starting with a digit.
func isIdent(s string) bool {
	for i, c := range s {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}
