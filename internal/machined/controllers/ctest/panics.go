package ctest

import (
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
)

// panicCore fails the test when the runtime logs that a controller panicked: the runtime
// recovers the panic and restarts the controller, so the assertions alone may still pass.
type panicCore struct {
	t      *testing.T
	fields []zapcore.Field
}

func (c *panicCore) Enabled(l zapcore.Level) bool { return l >= zapcore.ErrorLevel }

func (c *panicCore) With(fields []zapcore.Field) zapcore.Core {
	return &panicCore{t: c.t, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *panicCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}

	return ce
}

func (c *panicCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()

	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fields...) {
		f.AddTo(enc)
	}

	if err, _ := enc.Fields["error"].(string); strings.Contains(err, "panicked") {
		c.t.Errorf("%s: %v: %s", e.Message, enc.Fields["controller"], firstLine(err))
	}

	return nil
}

func (c *panicCore) Sync() error { return nil }

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")

	return first
}
