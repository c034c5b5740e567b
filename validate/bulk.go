package validate

import (
	"strconv"
	"strings"

	"github.com/exgate/exgate/apierror"
)

// Bulk is an accepted bulk request, in one of the three shapes a client
// of the API sends to the bulk route: a JSON array of orders (a bulk
// placement), a JSON array of order ids, or an object {"ids": [...]}
// (both a bulk cancel). An array is told apart by the kind of its first
// element: objects are orders, numbers and strings are order ids.
// Exactly one of Orders and IDs is set.
type Bulk struct {
	// Orders are the orders of a placement, in body order, each validated
	// by the rules of a single order.
	Orders []Order
	// IDs are the order ids of a cancel, in body order, as canonical
	// decimal digits (no sign, no leading zeros).
	IDs []string
	// Keyed reports that the ids came as {"ids": [...]}; the backend
	// receives that shape back.
	Keyed bool
}

// Cancel reports whether the bulk is a cancel.
func (b *Bulk) Cancel() bool { return b.IDs != nil }

// Len returns the number of orders or order ids: what the bulk is charged
// as against the limits.
func (b *Bulk) Len() int {
	if b.Cancel() {
		return len(b.IDs)
	}
	return len(b.Orders)
}

// AppendCanonical appends the canonical encoding of the bulk to dst, in
// the shape it came in and without white space: an array of the orders'
// canonical encodings (Order.AppendCanonical); an array of the ids as
// JSON strings of their digits; or {"ids": [...]} of those strings. An id
// goes as a string, the type the API documents for it, because every JSON
// parser reads a string of digits exactly, where one that reads numbers
// as doubles (JavaScript's) would read a 19-digit id as another id.
func (b *Bulk) AppendCanonical(dst []byte) []byte {
	if !b.Cancel() {
		dst = append(dst, '[')
		for i := range b.Orders {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = b.Orders[i].AppendCanonical(dst)
		}
		return append(dst, ']')
	}
	if b.Keyed {
		dst = append(dst, `{"ids":`...)
	}
	dst = append(dst, '[')
	for i, id := range b.IDs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, id...)
		dst = append(dst, '"')
	}
	dst = append(dst, ']')
	if b.Keyed {
		dst = append(dst, '}')
	}
	return dst
}

// MaxBulkBodyBytes returns the bulk body limit (validation.bulk.max_body_bytes).
func (v *Validator) MaxBulkBodyBytes() int64 { return v.maxBulkBody }

// PreCheckBulk is PreCheck for a bulk request: 415 without JSON, 413 when
// the declared length is over the bulk body limit.
func (v *Validator) PreCheckBulk(contentType []string, contentLength int64) *apierror.Error {
	if !jsonContentType(contentType) {
		return errMediaType
	}
	if contentLength > v.maxBulkBody {
		return v.errBulkTooLarge
	}
	return nil
}

// maxIDDigits bounds an order id: a positive 64-bit integer.
const maxIDDigits = 19

// span is one element of the bulk array: its bytes and its JSON kind.
type span struct {
	lo, hi int
	kind   kind
}

// CheckBulk validates a bulk request from its Content-Type header values
// and its whole body. The body must be one JSON value: an array of 1 to
// validation.bulk.max_orders elements, all orders (objects) or all order
// ids (positive whole numbers, as JSON numbers or strings of digits), or
// an object whose one member "ids" is such an array of order ids. Every
// order is checked with the rules of a single order; identifiers and ids
// must not repeat within the bulk. Every problem is reported at once,
// under the element's name: "orders[2].price", "ids[0]" (in either shape
// of a cancel). A bulk with any problem is refused whole.
func (v *Validator) CheckBulk(contentType []string, body []byte) (Bulk, *apierror.Error) {
	return v.checkBulk(contentType, body, false)
}

// CheckBulkCancel is CheckBulk for a route that only cancels: an array of
// orders is refused as a whole, before any of its orders is checked.
func (v *Validator) CheckBulkCancel(contentType []string, body []byte) (Bulk, *apierror.Error) {
	return v.checkBulk(contentType, body, true)
}

func (v *Validator) checkBulk(contentType []string, body []byte, cancelOnly bool) (Bulk, *apierror.Error) {
	if p := v.PreCheckBulk(contentType, int64(len(body))); p != nil {
		return Bulk{}, p
	}
	rs := v.current()
	if rs == nil && !v.pass {
		return Bulk{}, errUnavailable
	}
	var rep report
	p := parser{b: body}
	p.skipWS()
	if p.i >= len(p.b) {
		p.fail("empty body")
		return Bulk{}, parseError(p.err, p.i)
	}
	keyed := !p.at('[')
	if keyed {
		arr, e := idsMember(&p)
		if e != nil {
			return Bulk{}, e
		}
		p = arr
	}
	var room [32]span // a bulk's spans, on the stack up to 32 elements
	spans, n, ok := v.elements(&p, room[:0])
	if !ok {
		return Bulk{}, parseError(p.err, p.i)
	}
	switch {
	case n == 0:
		rep.add(NonFieldErrors, "the bulk must contain at least one order or order id")
		return Bulk{}, rep.doneAs(bulkLead)
	case n > v.maxBulk:
		rep.add(NonFieldErrors, "the bulk carries "+strconv.Itoa(n)+" elements; a bulk request takes at most "+strconv.Itoa(v.maxBulk))
		return Bulk{}, rep.doneAs(bulkLead)
	}
	b := Bulk{Keyed: keyed}
	switch {
	case keyed || spans[0].kind != kObject:
		b.IDs = make([]string, 0, n)
		bulkIDs(body, spans, &b, &rep)
	case cancelOnly:
		rep.add(NonFieldErrors, errCancelOnly)
	default:
		b.Orders = make([]Order, 0, n)
		v.bulkOrders(body, spans, rs, &b, &rep)
	}
	if rep.p != nil {
		return Bulk{}, rep.doneAs(bulkLead)
	}
	return b, nil
}

// errCancelOnly is the problem of an array of orders sent to a route that
// only cancels.
const errCancelOnly = `this route only cancels orders: send the order ids, as a JSON array or as {"ids": [...]}, not orders`

// bulkLead starts the detail of a refused bulk.
const bulkLead = "Invalid bulk request"

// idsMember reads a bulk body that is not an array (p at its first
// byte): the whole value is scanned, and it must be an object whose one
// member is "ids", an array. It returns a parser over that array, to be
// read as the bulk's elements, or the answer refusing the body: a parse
// error, or an invalid_order naming every member that is not a single
// "ids" array (an object without "ids" is refused as a whole, most likely
// a single order sent to the bulk route). A member exgate does not know
// is refused whatever validation.unknown_fields says: it could name more
// orders to cancel (by identifier, say), which exgate could neither check
// nor charge.
func idsMember(p *parser) (parser, *apierror.Error) {
	start := p.i
	top, ok := p.value(0)
	if !ok {
		return parser{}, parseError(p.err, p.i)
	}
	if p.skipWS(); p.i != len(p.b) {
		p.fail("data after the JSON value")
		return parser{}, parseError(p.err, p.i)
	}
	var rep report
	if top.kind != kObject {
		rep.add(NonFieldErrors, `expected a JSON array of orders or of order ids, or {"ids": [...]}, got `+top.kind.jsonName())
		return parser{}, rep.doneAs(bulkLead)
	}
	// The syntax is known good: walk the members.
	q := parser{b: p.b, i: start + 1}
	var arr parser
	var keys keySet
	idsRepeated := false
	for q.skipWS(); !q.at('}'); q.skipWS() {
		lo, hi, esc, _ := q.str()
		var kbuf [32]byte
		key := decoded(kbuf[:0], q.b[lo:hi], esc)
		dup := keys.add(q.b, lo, hi, esc)
		q.skipWS()
		q.i++ // ':'
		q.skipWS()
		vlo := q.i
		fv, _ := q.value(1)
		switch name, shown := safeName(key); {
		case string(key) == "ids" && dup:
			if !idsRepeated {
				rep.add("ids", "must appear only once")
				idsRepeated = true
			}
		case string(key) == "ids" && fv.kind != kArray:
			rep.add("ids", "must be a JSON array of order ids, got "+fv.kind.jsonName())
		case string(key) == "ids":
			arr = parser{b: q.b[:q.i], i: vlo}
		case dup:
			// already reported
		case shown:
			rep.add(name, "unknown field")
		default:
			rep.add(NonFieldErrors, "unknown field (its name is not shown: longer than 32 bytes or unusual characters)")
		}
		q.skipWS()
		if q.at(',') {
			q.i++
		}
	}
	if !rep.has("ids") && arr.b == nil {
		// No ids at all: most likely an order sent to the bulk route.
		rep = report{}
		rep.add(NonFieldErrors, `expected a JSON array of orders or of order ids, or {"ids": [...]}, got an object without "ids"`)
	}
	if rep.p != nil {
		return parser{}, rep.doneAs(bulkLead)
	}
	return arr, nil
}

// elements scans the array at p.i to its end and returns the spans of
// its first max_orders+1 elements, appended to spans, and the number of
// elements.
func (v *Validator) elements(p *parser, spans []span) (_ []span, n int, ok bool) {
	p.i++
	p.skipWS()
	if p.at(']') {
		p.i++
	} else {
		for {
			p.skipWS()
			lo := p.i
			e, ok := p.value(1)
			if !ok {
				return nil, 0, false
			}
			if n++; n <= v.maxBulk+1 {
				spans = append(spans, span{lo: lo, hi: p.i, kind: e.kind})
			}
			p.skipWS()
			if p.at(',') {
				p.i++
				continue
			}
			if p.at(']') {
				p.i++
				break
			}
			if p.i >= len(p.b) {
				return nil, 0, p.fail("unexpected end of input")
			}
			return nil, 0, p.fail("expected ',' or ']' after a value")
		}
	}
	if p.skipWS(); p.i != len(p.b) {
		return nil, 0, p.fail("data after the JSON array")
	}
	return spans, n, true
}

// bulkOrders checks each element of a placement as a single order.
func (v *Validator) bulkOrders(body []byte, spans []span, rs *compiled, b *Bulk, rep *report) {
	var seen map[string]int // the orders' identifiers, made at the first
	for i, s := range spans {
		name := "orders[" + strconv.Itoa(i) + "]"
		if s.kind != kObject {
			rep.add(name+"."+NonFieldErrors, "expected an order (a JSON object), got "+s.kind.jsonName())
			continue
		}
		var st state
		st.p.b = body[s.lo:s.hi]
		if !v.scan(&st) {
			// The array scan accepted the element's syntax, so this is
			// only reachable through a rule the two scans apply alike.
			rep.add(name+"."+NonFieldErrors, "is not a well-formed JSON object ("+st.p.err+")")
			continue
		}
		var o Order
		v.fields(&st, rs, &o)
		if ep := st.rep.p; ep != nil {
			for _, f := range st.rep.order {
				for _, msg := range ep.Fields[f] {
					rep.add(name+"."+f, msg)
				}
			}
			continue
		}
		if o.Identifier != "" {
			if j, dup := seen[o.Identifier]; dup {
				rep.add(name+".identifier", "repeats orders["+strconv.Itoa(j)+"].identifier")
				continue
			}
			if seen == nil {
				seen = make(map[string]int, len(spans))
			}
			seen[o.Identifier] = i
		}
		b.Orders = append(b.Orders, o)
	}
}

// Problems of an order id, in a bulk cancel's body and in a path's id
// list alike.
const (
	msgNotOrderID = "must be an order id: a positive whole number of at most 19 digits without sign or leading zeros"
	msgIDKind     = "must be an order id (a positive whole number), got "
)

// bulkIDs checks each element of a cancel as an order id.
func bulkIDs(body []byte, spans []span, b *Bulk, rep *report) {
	seen := make(map[string]int, len(spans))
	for i, s := range spans {
		name := "ids[" + strconv.Itoa(i) + "]"
		var text []byte
		switch s.kind {
		case kNumber:
			text = body[s.lo:s.hi]
		case kString:
			text = body[s.lo+1 : s.hi-1] // an id has no escapes; one with them is refused below
		default:
			rep.add(name, msgIDKind+s.kind.jsonName())
			continue
		}
		if !isOrderID(text) {
			rep.add(name, msgNotOrderID)
			continue
		}
		id := string(text)
		if j, dup := seen[id]; dup {
			rep.add(name, "repeats ids["+strconv.Itoa(j)+"]")
			continue
		}
		seen[id] = i
		b.IDs = append(b.IDs, id)
	}
}

// maxOrderID is the largest order id, the largest signed 64-bit integer.
const maxOrderID = "9223372036854775807"

// isOrderID reports whether t is 1 to maxIDDigits decimal digits without
// a leading zero that fit a signed 64-bit integer.
func isOrderID[T string | []byte](t T) bool {
	if len(t) == 0 || len(t) > maxIDDigits || t[0] == '0' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return false
		}
	}
	return len(t) < len(maxOrderID) || string(t) <= maxOrderID
}

// idListLead starts the detail of a refused id list.
const idListLead = "Invalid order ids"

// CheckIDList checks the order ids of a path parameter, such as the "3,2"
// of GET /api/v1/odr/orders/3,2/: one order id, or several joined by
// commas, each as in a bulk cancel (canonical digits, no repeats), at
// most max of them. It returns how many there are, or the 400
// invalid_order answer naming every bad element as a bulk cancel's
// ("ids[1]"). A list that checks is its own canonical form: nothing about
// it can be spelled another way. It does not allocate for a list that
// checks.
func CheckIDList(list string, max int) (int, *apierror.Error) {
	var rep report
	n := strings.Count(list, ",") + 1
	if n > max {
		rep.add(NonFieldErrors, "the list carries "+strconv.Itoa(n)+" order ids; a request takes at most "+strconv.Itoa(max))
		return 0, rep.doneAs(idListLead)
	}
	rest := list
	for i := 0; i < n; i++ {
		var id string
		id, rest, _ = strings.Cut(rest, ",")
		if !isOrderID(id) {
			rep.add("ids["+strconv.Itoa(i)+"]", msgNotOrderID)
			continue
		}
		if j := indexID(list, i, id); j >= 0 {
			rep.add("ids["+strconv.Itoa(i)+"]", "repeats ids["+strconv.Itoa(j)+"]")
		}
	}
	if rep.p != nil {
		return 0, rep.doneAs(idListLead)
	}
	return n, nil
}

// indexID returns the index of the first of the first k elements of list
// that equals id, or -1.
func indexID(list string, k int, id string) int {
	for j := 0; j < k; j++ {
		var e string
		e, list, _ = strings.Cut(list, ",")
		if e == id {
			return j
		}
	}
	return -1
}
