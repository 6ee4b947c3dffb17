// Package errkind says why machined's domain code refused or failed a request (the request is
// wrong, the node is not in a state to do it, what it names is not there, the node failed)
// without tying that code to gRPC: the machine API (internal/machined/server) turns each kind
// into its status code, in one place.
package errkind

import (
	"errors"
	"fmt"
)

// Kind is the reason class of an error.
type Kind int

// Kinds, each with the gRPC code the API answers with.
const (
	// Invalid: the request is wrong; the caller must change it (InvalidArgument).
	Invalid Kind = iota + 1
	// Precondition: the node cannot do it now; the caller must wait or change the node first
	// (FailedPrecondition).
	Precondition
	// NotFound: what the request names is not there (NotFound).
	NotFound
	// Internal: the node failed while doing it (Internal).
	Internal
)

// Error is an error of one kind. Its text is the message alone, so the kind never shows in
// what the caller reads.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap lets errors.Is and errors.As reach the cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind k with the text msg.
func New(k Kind, msg string) error { return &Error{Kind: k, Err: errors.New(msg)} }

// Errorf returns an error of kind k formatted as fmt.Errorf does (%w wraps the cause).
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...)}
}

// Wrap gives err the kind k, keeping its text.
func Wrap(k Kind, err error) error { return &Error{Kind: k, Err: err} }

// Of returns the kind of err, if it has one.
func Of(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}

	return 0, false
}
