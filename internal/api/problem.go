package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
	// Capability names what the system's storage lacks, for a request it cannot serve (409).
	Capability string `json:"capability,omitempty"`

	// retryAfter, when positive, is sent as the Retry-After header (seconds).
	retryAfter int
}

// FieldError names one invalid request field (the "invalid-params" extension).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// httpError is an error that carries the HTTP status and problem to answer with.
type httpError struct {
	status     int
	detail     string
	fields     []FieldError
	retryAfter int
	err        error
}

func (e *httpError) Error() string {
	if e.err != nil {
		return e.detail + ": " + e.err.Error()
	}
	return e.detail
}

func (e *httpError) Unwrap() error { return e.err }

func errStatus(status int, format string, args ...any) *httpError {
	return &httpError{status: status, detail: fmt.Sprintf(format, args...)}
}

func badField(field, format string, args ...any) *httpError {
	msg := fmt.Sprintf(format, args...)
	return &httpError{status: http.StatusBadRequest, detail: field + ": " + msg, fields: []FieldError{{Field: field, Message: msg}}}
}

func writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	p.Instance = redactPath(r.URL.Path)
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// decodeJSON reads one JSON object into v, rejecting unknown fields, trailing data and bodies
// over the server's cap, with errors that name the offending field.
func decodeJSON(r *http.Request, v any) error {
	// JSON, or no type, or what `curl -d` sends by default (form-urlencoded) or text/plain: the
	// body must parse as JSON either way. A body that says it is something else is refused.
	switch mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); {
	case mt == "", mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/x-www-form-urlencoded", mt == "text/plain":
	default:
		return errStatus(http.StatusUnsupportedMediaType, "Content-Type must be application/json, got %q", mt)
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			return errStatus(http.StatusBadRequest, "request body is empty: a JSON object is required")
		case errors.Is(err, errBodyTooSlow):
			return bodyTooSlow(err, "")
		case errors.As(err, &tooBig):
			return errStatus(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", tooBig.Limit)
		case errors.As(err, &syn):
			return errStatus(http.StatusBadRequest, "malformed JSON at byte %d: %v", syn.Offset, err)
		case errors.As(err, &typ):
			field := typ.Field
			if field == "" {
				field = "(body)"
			}
			return badField(field, "must be %s, got JSON %s", typ.Type.String(), typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badField(name, "unknown field")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errStatus(http.StatusBadRequest, "malformed JSON: unexpected end of body")
		}
		return errStatus(http.StatusBadRequest, "malformed JSON: %v", err)
	}
	if dec.More() {
		return errStatus(http.StatusBadRequest, "malformed JSON: data after the object")
	}
	return nil
}
