package upgrade

import (
	"go.uber.org/zap/zapcore"
)

// eventCore turns each info-level log line of an upgrade into a milestone event, whatever the
// level of the node's own log.
type eventCore struct {
	publish func(msg string)
}

func (c *eventCore) Enabled(l zapcore.Level) bool      { return l == zapcore.InfoLevel }
func (c *eventCore) With([]zapcore.Field) zapcore.Core { return c }
func (c *eventCore) Sync() error                       { return nil }

func (c *eventCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}

	return ce
}

func (c *eventCore) Write(e zapcore.Entry, _ []zapcore.Field) error {
	c.publish(e.Message)

	return nil
}
