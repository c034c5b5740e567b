package validate

import (
	"strconv"

	"github.com/exgate/exgate/apierror"
)

// Bulk is an accepted bulk request: a JSON array of orders (a bulk
// placement) or a JSON array of order ids (a bulk cancel), told apart by
// the kind of the first element: objects are orders, numbers and strings
// are order ids. Exactly one of Orders and IDs is set.
type Bulk struct {
	// Orders are the orders of a placement, in body order, each validated
	// by the rules of a single order.
	Orders []Order
	// IDs are the order ids of a cancel, in body order, as canonical
	// decimal digits (no sign, no leading zeros).
	IDs []string
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

// AppendCanonical appends the canonical encoding of the bulk to dst: a
// JSON array without white space of the orders' canonical encodings
// (Order.AppendCanonical), or of the ids as JSON numbers.
func (b *Bulk) AppendCanonical(dst []byte) []byte {
	dst = append(dst, '[')
	if b.Cancel() {
		for i, id := range b.IDs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, id...)
		}
	} else {
		for i := range b.Orders {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = b.Orders[i].AppendCanonical(dst)
		}
	}
	return append(dst, ']')
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
// and its whole body. The body must be one JSON array of 1 to
// validation.bulk.max_orders elements, all orders (objects) or all order
// ids (positive whole numbers, as JSON numbers or strings of digits).
// Every order is checked with the rules of a single order; identifiers
// and ids must not repeat within the bulk. Every problem is reported at
// once, under the element's name: "orders[2].price", "ids[0]". A bulk
// with any problem is refused whole.
func (v *Validator) CheckBulk(contentType []string, body []byte) (Bulk, *apierror.Error) {
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
	if !p.at('[') {
		top, ok := p.value(0)
		if !ok {
			return Bulk{}, parseError(p.err, p.i)
		}
		if p.skipWS(); p.i != len(p.b) {
			p.fail("data after the JSON value")
			return Bulk{}, parseError(p.err, p.i)
		}
		rep.add(NonFieldErrors, "expected a JSON array of orders or of order ids, got "+top.kind.jsonName())
		return Bulk{}, rep.doneAs(bulkLead)
	}
	spans, n, ok := v.elements(&p)
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
	var b Bulk
	if spans[0].kind == kObject {
		b.Orders = make([]Order, 0, n)
		v.bulkOrders(body, spans, rs, &b, &rep)
	} else {
		b.IDs = make([]string, 0, n)
		bulkIDs(body, spans, &b, &rep)
	}
	if rep.p != nil {
		return Bulk{}, rep.doneAs(bulkLead)
	}
	return b, nil
}

// bulkLead starts the detail of a refused bulk.
const bulkLead = "Invalid bulk request"

// elements scans the array at p.i to its end and returns the spans of
// its first max_orders+1 elements and the number of elements.
func (v *Validator) elements(p *parser) (spans []span, n int, ok bool) {
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
	seen := make(map[string]int, len(spans))
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
		o := v.fields(&st, rs)
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
			seen[o.Identifier] = i
		}
		b.Orders = append(b.Orders, o)
	}
}

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
			rep.add(name, "must be an order id (a positive whole number), got "+s.kind.jsonName())
			continue
		}
		if !isOrderID(text) {
			rep.add(name, "must be an order id: a positive whole number of at most 19 digits without sign or leading zeros")
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

// isOrderID reports whether t is 1 to maxIDDigits decimal digits without
// a leading zero that fit a signed 64-bit integer.
func isOrderID(t []byte) bool {
	if len(t) == 0 || len(t) > maxIDDigits || t[0] == '0' {
		return false
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(string(t), 10, 64)
	return err == nil
}
