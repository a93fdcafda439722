package keys

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// maxDepth is encoding/json's limit on nesting: json.Valid refuses a
// document with more than this many open objects and arrays.
const maxDepth = 10000

// IsJSON reports whether b is one JSON value, as encoding/json.Valid.
func IsJSON(b []byte) bool { return validJSON(b, nil) }

// validJSON reports whether b is one JSON value, exactly as json.Valid
// does: its grammar, bytes of 0x80 and above inside strings taken as they
// are (no UTF-8 check), and nesting deeper than maxDepth refused. It is
// one loop over the bytes, where encoding/json's scanner makes a call per
// byte: on a 256-byte envelope json.Valid was about 9,000 instructions of
// the proxy's 220,000 per message. FuzzValidJSON holds it to json.Valid.
//
// With top set, it also records where the members of a top-level object
// are, so that a key's lookup reads only the member it wants rather than
// scanning the whole body a second time.
func validJSON(b []byte, top *topIndex) bool {
	var buf [32]byte
	open := buf[:0] // '{' or '[' for each container not yet closed
	i := skipWS(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(open) >= maxDepth {
				return false
			}
			open = append(open, c)
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']'
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				name := i
				if i = member(b, i); i < 0 {
					return false
				}
				if top != nil && len(open) == 1 {
					top.begin(name, i)
				}
			}
			continue
		case '"':
			if i = stringAt(b, i); i < 0 {
				return false
			}
		case 't':
			if i = literal(b, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = literal(b, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = literal(b, i, "null"); i < 0 {
				return false
			}
		default:
			if i = number(b, i); i < 0 {
				return false
			}
		}
		// A value ended at b[i]: close what it ends, or find the next.
		for {
			if top != nil && len(open) == 1 {
				top.end(i)
			}
			i = skipWS(b, i)
			if len(open) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			last := open[len(open)-1]
			if b[i] == last+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipWS(b, i+1)
			if last == '{' {
				name := i
				if i = member(b, i); i < 0 {
					return false
				}
				if top != nil && len(open) == 1 {
					top.begin(name, i)
				}
			}
			break
		}
	}
}

// topIndex is where the members of a top-level object are, in order:
// the first maxTop of them; over says there were more, or that one lies
// past what its 32-bit offsets hold (no broker delivers a body of 2 GiB,
// but the scan is right for any size).
type topIndex struct {
	n    int
	over bool
	open bool // the last member's value has not ended yet
	m    [maxTop]topMember
}

// maxTop members are recorded: an envelope has a handful; a body with
// more is looked up by a scan, as without an index.
const maxTop = 12

// topMember is a member's name (from its opening quote) and its value.
type topMember struct{ name, value, end int32 }

func (t *topIndex) begin(name, value int) {
	if t.n == maxTop || value > math.MaxInt32 {
		t.over = true
		return
	}
	t.m[t.n] = topMember{name: int32(name), value: int32(value)}
	t.open = true
}

func (t *topIndex) end(i int) {
	if t.open {
		if i > math.MaxInt32 {
			t.over = true
		}
		t.m[t.n].end = int32(i)
		t.n++
		t.open = false
	}
}

// member reads an object member's name and colon at b[i]; it returns
// where its value starts, or -1.
func member(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringAt(b, i); i < 0 {
		return -1
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipWS(b, i+1)
}

// stringAt returns the index after the string at b[i] == '"', or -1.
func stringAt(b []byte, i int) int {
	for i++; i < len(b); i++ {
		if i = plainRun(b, i); i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		case c < 0x20:
			return -1
		}
	}
	return -1
}

// Eight copies of a byte, and the top bit of each of eight bytes.
const (
	ones = 0x0101010101010101
	tops = 0x8080808080808080
)

// plainRun returns the index of the first byte from b[i] on that may end
// or escape a string: a quote, a backslash or a control character. It
// tests eight bytes at a time (x has a zero byte iff (x-ones) &^ x &
// tops != 0; a byte below 0x20 likewise with 0x20 in place of 1), so
// that the bodies' long string values cost a few instructions per eight
// bytes rather than per byte: they are most of what the key lookup
// reads, twice per message. In the last seven bytes it stops at once;
// the caller looks at b[i] itself.
func plainRun(b []byte, i int) int {
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		q, s := x^(ones*'"'), x^(ones*'\\')
		if m := ((x-ones*0x20)&^x | (q-ones)&^q | (s-ones)&^s) & tops; m != 0 {
			// A borrow only runs upwards from a byte that matched, so
			// the lowest flagged byte is the first that matched.
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	return i
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// number returns the index after the number at b[i], or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i+1 >= len(b) || !isDigit(b[i+1]) {
			return -1
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		i = digits(b, i)
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
