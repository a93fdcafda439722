package pipeline

import (
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
)

// contentType is the Content-Type the app gets: the source's content_type,
// else the message's own, else application/json for a body that is JSON
// (a Redis list element or stream field has no content type, and Express's
// express.json() or Flask 2.3+ refuse an octet-stream JSON body: {} or
// 415), else "", which the forwarder sends as application/octet-stream.
// Whether the body is JSON is usually known already from the key rules.
func (w *work) contentType() string {
	if ct := w.s.ContentType; ct != "" {
		return ct
	}
	m := w.d.Message()
	if m.ContentType != "" {
		return m.ContentType
	}
	if m.BodyJSON == broker.JSONUnchecked {
		m.BodyJSON = broker.JSONInvalid
		if keys.IsJSON(m.Body) {
			m.BodyJSON = broker.JSONValid
		}
	}
	if m.BodyJSON == broker.JSONValid {
		return "application/json"
	}
	return ""
}
