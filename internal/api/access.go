package api

import (
	"errors"
	"net/http"

	"github.com/sshapi/sshapi/internal/access"
)

// accessProblem maps the access layer's refusals to problems.
func accessProblem(err error) (Problem, bool) {
	var fe *access.FieldError
	if errors.As(err, &fe) {
		he := badField(fe.Field, "%s", fe.Message)
		return Problem{Status: he.status, Detail: he.detail, Errors: he.fields}, true
	}
	var ae *access.Error
	if !errors.As(err, &ae) {
		return Problem{}, false
	}
	status := http.StatusConflict
	switch ae.Kind {
	case access.ErrBusy:
		return Problem{Status: http.StatusServiceUnavailable, Detail: ae.Detail, retryAfter: 1}, true
	case access.ErrCertificate:
		status = http.StatusBadGateway
	case access.ErrDenied, access.ErrDisabled:
		status = http.StatusForbidden
	case access.ErrInvalidRef:
		status = http.StatusBadRequest
	}
	return Problem{Status: status, Detail: ae.Detail}, true
}
