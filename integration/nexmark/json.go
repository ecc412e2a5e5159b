package nexmark

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends the event's JSON object to dst and returns the extended buffer: the
// fields of Flink Nexmark's schema, in its order and with its names, times as epoch ms:
//
//	person:  {"id","name","emailAddress","creditCard","city","state","dateTime","extra"}
//	auction: {"id","itemName","description","initialBid","reserve","dateTime","expires","seller","category","extra"}
//	bid:     {"auction","bidder","price","channel","url","dateTime","extra"}
//
// Strings are escaped as encoding/json does, without its HTML escaping.
func (e *Event) AppendJSON(dst []byte) []byte {
	switch e.Kind {
	case KindPerson:
		p := &e.Person
		dst = appendInt(append(dst, `{"id":`...), p.ID)
		dst = appendString(append(dst, `,"name":`...), p.Name)
		dst = appendString(append(dst, `,"emailAddress":`...), p.EmailAddress)
		dst = appendString(append(dst, `,"creditCard":`...), p.CreditCard)
		dst = appendString(append(dst, `,"city":`...), p.City)
		dst = appendString(append(dst, `,"state":`...), p.State)
		dst = appendInt(append(dst, `,"dateTime":`...), p.DateTime)
		dst = appendString(append(dst, `,"extra":`...), p.Extra)
	case KindAuction:
		a := &e.Auction
		dst = appendInt(append(dst, `{"id":`...), a.ID)
		dst = appendString(append(dst, `,"itemName":`...), a.ItemName)
		dst = appendString(append(dst, `,"description":`...), a.Description)
		dst = appendInt(append(dst, `,"initialBid":`...), a.InitialBid)
		dst = appendInt(append(dst, `,"reserve":`...), a.Reserve)
		dst = appendInt(append(dst, `,"dateTime":`...), a.DateTime)
		dst = appendInt(append(dst, `,"expires":`...), a.Expires)
		dst = appendInt(append(dst, `,"seller":`...), a.Seller)
		dst = appendInt(append(dst, `,"category":`...), a.Category)
		dst = appendString(append(dst, `,"extra":`...), a.Extra)
	default:
		b := &e.Bid
		dst = appendInt(append(dst, `{"auction":`...), b.Auction)
		dst = appendInt(append(dst, `,"bidder":`...), b.Bidder)
		dst = appendInt(append(dst, `,"price":`...), b.Price)
		dst = appendString(append(dst, `,"channel":`...), b.Channel)
		dst = appendString(append(dst, `,"url":`...), b.URL)
		dst = appendInt(append(dst, `,"dateTime":`...), b.DateTime)
		dst = appendString(append(dst, `,"extra":`...), b.Extra)
	}
	return append(dst, '}')
}

func appendInt(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: '"' and '\\' escaped, control characters as \n, \r,
// \t or \u00XX, invalid UTF-8 as U+FFFD; everything else as is.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(append(dst, s[start:i]...), `\ufffd`...)
				i += size
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, `\u00`...)
			dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	return append(append(dst, s[start:]...), '"')
}
